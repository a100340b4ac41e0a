"""The privacy-ledger command, run as a subprocess against a live server."""

from __future__ import annotations

import json
import os
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


def test_datasets_status_charge_compose(server: Server, tmp_path: Path) -> None:
    r = cli(
        "datasets",
        "create",
        "census",
        "--epsilon",
        "1",
        "--delta",
        "1e-6",
        "--no-adaptive",
        "--json",
        url=server.url,
    )
    assert r.returncode == 0, r.stderr
    ds = json.loads(r.stdout)
    assert ds["filter"] == "rdp"

    r = cli(
        "charge",
        "census",
        "--mechanism",
        "gaussian",
        "--sigma",
        "8",
        "--label",
        "counts",
        url=server.url,
    )
    assert r.returncode == 0 and "recorded as entry" in r.stdout
    r = cli(
        "charge",
        "census",
        "--mechanism-json",
        '{"mechanism": "laplace", "epsilon": 0.1}',
        "--json",
        url=server.url,
    )
    assert json.loads(r.stdout)["entry"]["mechanism"]["epsilon"] == 0.1
    r = cli("charge", "census", "--mechanism", "laplace", "--epsilon", "5", url=server.url)
    assert r.returncode == 2 and "budget" in r.stderr.lower()  # refused for budget
    r = cli("charge", "census", "--mechanism", "gaussian", "--sigma", "-1", url=server.url)
    assert r.returncode == 1 and "sigma" in r.stderr

    listed = cli("datasets", "--json", url=server.url)
    assert [d["name"] for d in json.loads(listed.stdout)] == ["census"]
    human = cli("datasets", url=server.url)
    assert "census" in human.stdout and "rdp" in human.stdout

    st = json.loads(cli("status", "census", "--json", url=server.url).stdout)
    assert st["entries"] == 2
    table = cli("status", "census", url=server.url).stdout
    assert "budget" in table and "remaining" in table and "gaussian" in table and "laplace" in table

    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps([{"mechanism": "gaussian", "sigma": 3.0, "count": 10}]))
    r = cli("compose", str(plan), "--delta", "1e-5", "--json", url=server.url)
    answer = json.loads(r.stdout)
    assert answer["method"] == "gaussian_exact" and answer["epsilon"] == pytest.approx(
        4.652985, abs=2e-6
    )
    assert "gaussian_exact" in cli("compose", str(plan), "--delta", "1e-5", url=server.url).stdout


def test_keys_commands(server: Server, sqlite_url: str) -> None:
    r = cli("keys", "create", "--role", "viewer", "--label", "dash", "--json", url=server.url)
    created = json.loads(r.stdout)
    assert created["key"].startswith("pl_v_")
    listed = cli("keys", "list", "--json", url=server.url)
    assert created["key"] not in listed.stdout
    assert created["id"] in {k["id"] for k in json.loads(listed.stdout)}
    # the new key works, then is revoked
    assert cli("datasets", "--json", url=server.url, key=created["key"]).returncode == 0
    assert cli("keys", "revoke", created["id"], url=server.url).returncode == 0
    denied = cli("datasets", url=server.url, key=created["key"])
    assert denied.returncode == 1 and "revoked" in denied.stderr
    # server-side creation straight into the database
    local = cli("keys", "create", "--role", "pipeline", "--local", db=sqlite_url)
    assert local.returncode == 0 and "pl_p_" in local.stdout


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
