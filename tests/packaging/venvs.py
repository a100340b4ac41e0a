"""Fresh virtual environments for install tests: made outside the checkout, run from elsewhere.

Installs go through the ordinary pip of each new environment, with this machine's pip
configuration (package index, find-links, cache); nothing is downloaded beyond what pip asks
the configured index for.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def clean_env(
    extra: Mapping[str, str] | None = None, path_first: Path | None = None
) -> dict[str, str]:
    """The environment without this checkout's virtualenv, PYTHONPATH or ledger settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
        and not k.startswith("PRIVACY_LEDGER_")
    }
    if path_first is not None:
        env["PATH"] = f"{path_first}{os.pathsep}{env.get('PATH', '')}"
    env.update(extra or {})
    return env


def run(
    cmd: list[str],
    cwd: Path,
    env: Mapping[str, str] | None = None,
    timeout: float = 900,
) -> subprocess.CompletedProcess[str]:
    """Run ``cmd``; on failure the assertion shows its output."""
    done = subprocess.run(
        cmd, cwd=cwd, env=dict(env or clean_env()), capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, f"{cmd} failed ({done.returncode}):\n{done.stdout}\n{done.stderr}"
    return done


def create_venv(path: Path) -> Path:
    """A new virtual environment with pip, from ``PRIVACY_LEDGER_TEST_PYTHON`` (an interpreter
    path, e.g. the oldest Python the client supports) or this interpreter; returns its python."""
    base = os.environ.get("PRIVACY_LEDGER_TEST_PYTHON", sys.executable)
    run([base, "-m", "venv", str(path)], cwd=path.parent)
    return path / "bin" / "python"


def distributions(python: Path) -> dict[str, str]:
    """Installed distributions of the environment of ``python``: normalised name -> version."""
    code = (
        "import importlib.metadata as m, json, re;"
        "print(json.dumps({re.sub(r'[-_.]+', '-', d.metadata['Name']).lower(): d.version"
        " for d in m.distributions()}))"
    )
    out = run([str(python), "-c", code], cwd=python.parent, env=clean_env())
    return dict(json.loads(out.stdout))
