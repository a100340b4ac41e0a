"""The privacy-ledger command, run as a subprocess against a live server."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.conftest import ADMIN_KEY
from tests.live import ROOT, Server, running


@pytest.fixture
def server(sqlite_url: str) -> Iterator[Server]:
    with running(sqlite_url, ADMIN_KEY) as s:
        yield s


def cli(
    *args: str, url: str | None = None, key: str | None = ADMIN_KEY, db: str | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVACY_LEDGER_")}
    if url:
        env["PRIVACY_LEDGER_URL"] = url
    if key:
        env["PRIVACY_LEDGER_API_KEY"] = key
    if db:
        env["PRIVACY_LEDGER_DATABASE_URL"] = db
    return subprocess.run(
        [sys.executable, "-m", "app.cli", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_keys_create_local_writes_to_the_database(sqlite_url: str) -> None:
    """Server-side creation straight into the database (the rest of the CLI runs in-process
    through typer's runner in test_commands.py, plus one real subprocess below)."""
    local = cli("keys", "create", "--role", "pipeline", "--local", db=sqlite_url)
    assert local.returncode == 0 and "pl_p_" in local.stdout
    # --database-url as migrate, verify and prune-idempotency take it (docs/client.md groups
    # them); it names the database, so without --local it is refused, not ignored
    flag = cli(
        "keys", "create", "--role", "viewer", "--local", "--json", "--database-url", sqlite_url
    )
    assert flag.returncode == 0, flag.stderr
    made = json.loads(flag.stdout)
    path = sqlite_url.removeprefix("sqlite:///")
    with sqlite3.connect(path) as con:
        roles = dict(con.execute("SELECT id, role FROM api_key").fetchall())
    assert roles[made["id"]] == "viewer"
    # audited as made on the server's machine (no key made them), not as an anonymous SYSTEM act
    with sqlite3.connect(path) as con:
        events = con.execute(
            "SELECT key_id, details FROM audit_event WHERE action = 'key.created'"
        ).fetchall()
    assert len(events) == 2
    assert all(key is None and json.loads(d)["via"] == "local" for key, d in events)
    remote = cli("keys", "create", "--role", "viewer", "--database-url", sqlite_url)
    assert remote.returncode == 1 and "--local" in remote.stderr  # as --allocation with --local


def test_migrate_and_verify(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert "schema at head" in cli("migrate", db=url).stdout
    r = cli("verify", "--json", db=url)
    assert r.returncode == 0 and json.loads(r.stdout)["ok"] is True


def test_the_installed_command_prints_its_version_and_charges(server: Server) -> None:
    """The console script pip installed (``.venv/bin/privacy-ledger``), not ``python -m``."""
    command = Path(sys.executable).with_name("privacy-ledger")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PRIVACY_LEDGER_")}
    env |= {"PRIVACY_LEDGER_URL": server.url, "PRIVACY_LEDGER_API_KEY": ADMIN_KEY}

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(command), *args], env=env, capture_output=True, text=True, timeout=120
        )

    version = run("--version")
    assert version.returncode == 0 and version.stdout.startswith("privacy-ledger 0.1.0")
    assert run("datasets", "create", "census", "--epsilon", "1", "--delta", "1e-6").returncode == 0
    r = run("charge", "census", "--mechanism", "discrete_laplace", "--sensitivity", "1",
            "--epsilon", "0.25", "--json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    entry = json.loads(r.stdout)["entry"]
    assert entry["mechanism"]["sensitivity"] == 1 and entry["seq"] == 1
    assert (
        httpx.get(
            f"{server.url}/v1/datasets/census/budget",
            headers={"Authorization": f"Bearer {ADMIN_KEY}"},
        ).json()["entries"]
        == 1
    )
    # the CSV export over real HTTP (a chunked, streamed answer) is the server's, as it is
    export = httpx.get(
        f"{server.url}/v1/datasets/census/ledger",
        params={"format": "csv"},
        headers={"Authorization": f"Bearer {ADMIN_KEY}"},
    )
    csv_out = run("ledger", "census", "--format", "csv")
    assert csv_out.returncode == 0 and csv_out.stdout == export.text, csv_out.stderr


def test_serve_on_a_taken_port_fails_before_creating_a_key(tmp_path: Path) -> None:
    """Newcomer audit (stop 31): on a port already in use, `serve` (and `make run`) started,
    created and printed the first admin key, then failed to bind; the next start on a free port
    printed no key. It now fails first, naming the port and how to choose another, and the
    database has no key (the next start creates and prints one)."""
    db = tmp_path / "x.db"
    url = f"sqlite:///{db}"
    assert cli("migrate", db=url).returncode == 0
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        r = cli("serve", "--port", str(port), db=url, key=None)
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert f"cannot listen on 127.0.0.1:{port}" in r.stderr and "--port" in r.stderr
    assert "Traceback" not in r.stderr and "admin key was created" not in r.stdout
    keys = sqlite3.connect(db).execute("SELECT count(*) FROM api_key").fetchone()
    assert keys == (0,)


def test_the_client_commands_load_no_server_module() -> None:
    """Newcomer audit (stop 31): every command, --version included, took 2.4 s of CPU to start,
    importing the services, FastAPI, SQLAlchemy, scipy.signal and scipy.stats. The command line
    now imports the server's modules in the commands that use them (migrate, serve, verify,
    keys create --local); this counts what loading it imports, not how long it takes."""
    heavy = [
        "alembic",
        "app.accounting.conversions",
        "app.accounting.pld",
        "app.api",
        "app.db",
        "app.services",
        "fastapi",
        "scipy.optimize",
        "scipy.signal",
        "scipy.stats",
        "sqlalchemy",
        "uvicorn",
    ]
    probe = f"import sys, app.cli; print([m for m in {heavy!r} if m in sys.modules])"
    r = subprocess.run(
        [sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "[]"
