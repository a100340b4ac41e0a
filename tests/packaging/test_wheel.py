"""The server wheel is complete: built as the Dockerfile builds it, installed into a fresh venv
outside the checkout, it migrates a new database and serves a charge.

Cost: two local wheel builds (no build isolation, so no download) and one ``pip install`` of the
runtime dependencies through this machine's pip configuration (its package index and cache).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.live import PORT_ATTEMPTS, await_ready, free_port
from tests.packaging.dockerfile import stages
from tests.packaging.venvs import ROOT, clean_env, create_venv, run

pytestmark = pytest.mark.slow

ADMIN_KEY = "wheel-admin-key-0123456789-abcdefghijklmnop"
_SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info", "build", "dist")


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The server and client wheels, built from exactly what the Dockerfile's build stage
    copies (so the image's build context is checked to be enough, too)."""
    src = tmp_path_factory.mktemp("context")
    for copy in stages()[0].copies():
        for source in copy.sources:
            origin, target = ROOT / source, src / source
            if origin.is_dir():
                shutil.copytree(origin, target, ignore=_SKIP)
            else:
                shutil.copy2(origin, target)
    out = tmp_path_factory.mktemp("wheels")
    run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
        + ["--wheel-dir", str(out), ".", "./client"],
        cwd=src,
    )
    return {
        "server": next(out.glob("privacy_ledger-*.whl")),
        "client": next(out.glob("privacy_ledger_client-*.whl")),
    }


def _expected_files() -> set[str]:
    """Every source file the server needs at run time, as its path inside the wheel."""
    app = {
        f"app/{p.relative_to(ROOT / 'app').as_posix()}"
        for p in (ROOT / "app").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    migrations = {
        f"app/_migrations/{p.relative_to(ROOT / 'migrations').as_posix()}"
        for p in (ROOT / "migrations").rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }
    return app | migrations


def test_the_wheel_holds_every_module_migration_and_static_file(wheels: dict[str, Path]) -> None:
    names = set(zipfile.ZipFile(wheels["server"]).namelist())
    missing = _expected_files() - names
    assert not missing, f"missing from the wheel (list new packages in pyproject): {missing}"
    assert {"app/_migrations/env.py", "app/_migrations/script.py.mako"} <= names
    assert any(n.startswith("app/_migrations/versions/") for n in names)
    client = set(zipfile.ZipFile(wheels["client"]).namelist())
    assert "privacy_ledger_client/py.typed" in client


@pytest.fixture(scope="module")
def installed(wheels: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with both wheels (and the runtime dependencies) installed; its bin dir."""
    python = create_venv(tmp_path_factory.mktemp("server") / "venv")
    run(
        [str(python), "-m", "pip", "install", str(wheels["server"]), str(wheels["client"])],
        cwd=python.parent,
    )
    return python.parent


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    assert not tmp_path.resolve().is_relative_to(ROOT)
    return tmp_path


def test_the_installed_wheel_migrates_a_new_database(installed: Path, workdir: Path) -> None:
    url = f"sqlite:///{workdir / 'ledger.db'}"
    out = run([str(installed / "privacy-ledger"), "migrate", "--database-url", url], cwd=workdir)
    assert "schema at head" in out.stdout
    probe = run(
        [
            str(installed / "python"),
            "-c",
            "import app, app.db.migrate as m, privacy_ledger_client as c;"
            "print(app.__file__); print(m.migrations_dir()); print(c.__file__);"
            f"print(m.is_at_head({url!r}))",
        ],
        cwd=workdir,
    ).stdout.split()
    venv = installed.parent
    for path in probe[:3]:
        assert Path(path).is_relative_to(venv) and not Path(path).is_relative_to(ROOT), path
    assert Path(probe[1]).name == "_migrations" and probe[3] == "True"


@pytest.fixture
def served(installed: Path, workdir: Path) -> Iterator[str]:
    """``privacy-ledger serve`` from the wheel on a fresh database (migrated at start-up); on
    another port if another process took the one ``free_port`` chose before it bound it."""
    env = clean_env(
        {
            "PRIVACY_LEDGER_DATABASE_URL": f"sqlite:///{workdir / 'served.db'}",
            "PRIVACY_LEDGER_ADMIN_KEY": ADMIN_KEY,
        }
    )
    for _ in range(PORT_ATTEMPTS):
        port = free_port()
        log_path = workdir / f"server-{port}.log"
        log = log_path.open("wb")
        proc = subprocess.Popen(
            [str(installed / "privacy-ledger"), "serve", "--port", str(port)],
            cwd=workdir,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            ready = await_ready(proc, port, log_path, timeout=180)
            if ready:
                yield f"http://127.0.0.1:{port}"
                return
        except RuntimeError as exc:
            pytest.fail(f"the server from the wheel: {exc}")
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
            log.close()
    pytest.fail(f"the server from the wheel lost its port {PORT_ATTEMPTS} times")


def test_the_installed_wheel_serves_a_charge(served: str) -> None:
    with httpx.Client(
        base_url=served, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=120
    ) as api:
        ds = api.post("/v1/datasets", json={"name": "w", "budget": {"epsilon": 1, "delta": 1e-6}})
        assert ds.status_code == 201, ds.text
        charge = api.post(
            "/v1/datasets/w/charges",
            json={"mechanism": {"mechanism": "gaussian", "sigma": 8.0}},
            headers={"Idempotency-Key": "wheel-1"},
        )
        assert charge.status_code == 201, charge.text
        assert charge.json()["entry"]["mechanism"]["sigma"] == 8.0
        assert api.get("/v1/datasets/w/budget").json()["entries"] == 1
        page = api.get("/")  # the dashboard's files came with the wheel
        assert page.status_code == 200 and "<html" in page.text.lower()
        assert api.get("/static/app.js").status_code == 200
        assert api.get("/docs").status_code == 200  # the API pages' assets are installed too
        assert api.get("/static-docs/swagger-ui-bundle.js").status_code == 200
