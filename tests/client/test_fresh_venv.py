"""The client installed alone into a fresh virtual environment, used against a live server.

``pip install ./client`` (as docs/quickstart.md says) must bring httpx and nothing of the server (FastAPI, SQLAlchemy, numpy,
scipy, the ``app`` package); the installed package must then work from a directory outside the
checkout, where the source tree cannot shadow it.
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.client.conftest import ClientVenv
from tests.conftest import ADMIN_KEY
from tests.live import Server, running
from tests.packaging.venvs import ROOT, clean_env, run

pytestmark = pytest.mark.slow

SERVER_ONLY = {
    "fastapi",
    "starlette",
    "sqlalchemy",
    "alembic",
    "psycopg",
    "numpy",
    "scipy",
    "pydantic",
    "uvicorn",
    "typer",
    "privacy-ledger",
}


@pytest.fixture
def server(sqlite_url: str) -> Iterator[Server]:
    with running(sqlite_url, ADMIN_KEY) as s:
        yield s


def test_the_client_installs_without_the_server(client_venv: ClientVenv) -> None:
    python, installed = client_venv.python, client_venv.installed_with_the_client
    assert "privacy-ledger-client" in installed and "httpx" in installed
    assert not SERVER_ONLY & set(installed), sorted(SERVER_ONLY & set(installed))
    probe = "import importlib.util as u; print([m for m in ('app', 'fastapi') if u.find_spec(m)])"
    assert run([str(python), "-c", probe], cwd=python.parent).stdout.strip() == "[]"


SCRIPT = textwrap.dedent(
    """
    import asyncio, json, privacy_ledger_client as plc
    from privacy_ledger_client import BudgetExceeded, LedgerClient, AsyncLedgerClient, gaussian

    out = {"module": plc.__file__, "version": plc.__version__}
    with LedgerClient() as admin:                      # PRIVACY_LEDGER_URL / _API_KEY
        ds = admin.create_dataset("fresh", 1.0, 1e-6, adaptive=False)
        out["charged_sigma"] = admin.charge(ds.id, gaussian(sigma=8.0)).entry.mechanism["sigma"]
        with admin.reservation(ds.id, gaussian(sigma=10.0), label="held") as hold:
            pass
        out["hold"] = hold.outcome
        try:
            admin.charge(ds.id, gaussian(sigma=0.5))
        except BudgetExceeded as exc:
            out["refused_budget"] = exc.budget.epsilon

    async def read():
        async with AsyncLedgerClient() as c:
            return (await c.budget("fresh")).entries

    out["entries"] = asyncio.run(read())
    print(json.dumps(out))
    """
)


def test_the_installed_client_talks_to_a_live_server(
    client_venv: ClientVenv, server: Server, tmp_path: Path
) -> None:
    python = client_venv.python
    script = tmp_path / "pipeline.py"
    script.write_text(SCRIPT)
    env = clean_env({"PRIVACY_LEDGER_URL": server.url, "PRIVACY_LEDGER_API_KEY": ADMIN_KEY})
    out = json.loads(run([str(python), str(script)], cwd=tmp_path, env=env).stdout)
    assert not Path(out["module"]).is_relative_to(ROOT)  # the installed copy, not the source
    assert Path(out["module"]).is_relative_to(python.parent.parent)
    assert out["version"] == "0.1.0"
    assert out == {**out, "charged_sigma": 8.0, "hold": "committed", "refused_budget": 1.0}
    assert out["entries"] == 2
    ledger = httpx.get(
        f"{server.url}/v1/datasets/fresh/ledger",
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        timeout=120,
    ).json()
    assert sorted(e["mechanism"]["sigma"] for e in ledger["entries"]) == [8.0, 10.0]
