"""The structure the layers rely on (the layer contracts themselves run in `make lint`)."""

from __future__ import annotations

import ast
from pathlib import Path

APP = Path(__file__).resolve().parent.parent / "app"


def _function_level_app_imports(path: Path, root: Path = APP.parent) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.ImportFrom) and (
                node.level > 0 or (node.module or "").startswith("app")
            ):
                found.append(f"{path.relative_to(root)}:{node.lineno} from {node.module}")
            elif isinstance(node, ast.Import):
                found += [
                    f"{path.relative_to(root)}:{node.lineno} import {a.name}"
                    for a in node.names
                    if a.name == "app" or a.name.startswith("app.")
                ]
    return found


def test_no_function_level_imports_of_app_modules() -> None:
    """An import of an app module inside a function is how an import circle hides from the
    module graph; every app import is at module level, where `lint-imports` sees it.

    One exception: the command line (``app/cli``) imports the server's modules (services,
    database, migrations, the PLD) in the commands that need them, so that the client's
    commands start in a fraction of a second. No circle can hide there: the layers contract
    keeps every other app module from importing ``app.cli``, and these imports never name an
    ``app.cli`` module (a circle among its own modules would)."""
    cli = APP / "cli"
    offenders = [
        hit
        for path in sorted(APP.rglob("*.py"))
        for hit in _function_level_app_imports(path)
        if cli not in path.parents or " app.cli" in hit or hit.endswith(" None")
    ]
    assert offenders == []
    lazy = [hit for path in sorted(cli.rglob("*.py")) for hit in _function_level_app_imports(path)]
    assert lazy, "the exception above is no longer used: drop it"


def test_the_scan_finds_a_function_level_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from app.services import charges\n    import app.db\n")
    assert _function_level_app_imports(probe, tmp_path) == [
        "probe.py:2 from app.services",
        "probe.py:3 import app.db",
    ]


def test_the_accounting_packages_lazy_exports_agree() -> None:
    """``app.accounting`` names its re-exports three times: for type checkers (the
    ``TYPE_CHECKING`` imports), at run time (``_HOME``, the module each is imported from on
    first use) and in ``__all__``. The three name the same things, and each name is the object
    its module defines."""
    import importlib

    import app.accounting as package

    tree = ast.parse((APP / "accounting" / "__init__.py").read_text())
    typed = {
        alias.name: (node.module or "").rsplit(".", 1)[-1]
        for block in tree.body
        if isinstance(block, ast.If)
        for node in block.body
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    }
    assert typed == package._HOME
    assert sorted(package.__all__) == sorted(typed)
    for name, home in typed.items():
        module = importlib.import_module(f"app.accounting.{home}")
        assert getattr(package, name) is getattr(module, name), name
