"""The in-process runner of the ``privacy-ledger`` command (``run``), shared by the CLI tests:
typer's runner against the TestClient's app (``app.cli.common.TRANSPORT``), so every command
goes through ``privacy_ledger_client`` and the real HTTP routes without a server process."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from typer.testing import CliRunner, Result

from app.cli import cli, common
from tests.conftest import ADMIN_KEY


class Cli:
    """Runs the command with the admin key (or another) against the TestClient's app."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.runner = CliRunner()

    def __call__(self, *args: str, key: str | None = ADMIN_KEY, code: int | None = 0) -> Result:
        env = {"PRIVACY_LEDGER_URL": "http://testserver", "COLUMNS": "200"}
        env["PRIVACY_LEDGER_API_KEY"] = key or ""
        result = self.runner.invoke(cli, list(args), env=env)
        if code is not None:
            assert result.exit_code == code, (result.stdout, result.stderr, result.exception)
        return result

    def json(self, *args: str, key: str | None = ADMIN_KEY) -> Any:
        return json.loads(self(*args, "--json", key=key).stdout)

    def dataset(self, name: str = "census", *extra: str) -> dict[str, Any]:
        """``datasets create NAME`` with a budget of (1, 1e-6) and ``extra`` flags: the answer."""
        created: dict[str, Any] = self.json(
            "datasets", "create", name, "--epsilon", "1", "--delta", "1e-6", *extra
        )
        return created


@pytest.fixture
def run(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cli]:
    monkeypatch.setattr(common, "TRANSPORT", client._transport)
    # tables as wide as the env's COLUMNS says: rich fixes a console's width when it is created
    # if COLUMNS is set then (pytest-xdist workers set COLUMNS=80), so set it here
    monkeypatch.setattr(common.console, "width", 200)
    monkeypatch.setattr(common.err_console, "width", 200)
    yield Cli(client)
