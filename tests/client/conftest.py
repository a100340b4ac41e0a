"""A fresh virtual environment with the client installed as docs/quickstart.md says."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.packaging.venvs import ROOT, clean_env, create_venv, distributions, run

QUICKSTART = ROOT / "docs" / "quickstart.md"
_FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.DOTALL | re.MULTILINE)


def code_blocks(path: Path = QUICKSTART) -> list[tuple[str, str]]:
    """The fenced code blocks of a Markdown file: (language, text), in order."""
    return [(lang, text) for lang, text in _FENCE.findall(path.read_text())]


@dataclass(frozen=True)
class ClientVenv:
    python: Path
    installed_with_the_client: dict[str, str]  # distributions right after `pip install ./client`


@pytest.fixture(scope="session")
def client_venv(tmp_path_factory: pytest.TempPathFactory) -> ClientVenv:
    """A fresh venv where the quickstart's install commands were run, line by line, with the
    venv's ``python`` first on PATH and the checkout as the working directory."""
    python = create_venv(tmp_path_factory.mktemp("client") / "venv")
    env = clean_env(path_first=python.parent)
    install = next(text for lang, text in code_blocks() if lang == "sh" and "pip install" in text)
    after_client: dict[str, str] | None = None
    for line in install.splitlines():
        command = line.split("#", 1)[0].strip()
        if not command:
            continue
        assert shlex.split(command)[:4] == ["python", "-m", "pip", "install"], command
        run(["bash", "-c", command], cwd=ROOT, env=env)
        if "./client" in command:
            after_client = distributions(python)
    assert after_client is not None, "the quickstart never installs ./client"
    return ClientVenv(python, after_client)
