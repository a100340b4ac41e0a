"""``privacy-ledger serve`` takes its worker count from --workers, else WEB_CONCURRENCY, else 1
(the Docker image and docker-compose.yml set WEB_CONCURRENCY)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from typer.testing import CliRunner

from app.cli import cli
from app.cli import server as serve_command
from app.config import get_settings


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[list[dict[str, Any]]]:
    """uvicorn.run replaced by a recorder; the environment restored afterwards. Nothing
    listens, so the port pre-check is told the port is free: a server the developer runs on
    the default port (``make run``) would otherwise fail these tests."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: calls.append({"app": app, **kw}))
    monkeypatch.setattr(serve_command, "_port_taken", lambda host, port: None)
    monkeypatch.setenv("PROMETHEUS_MULTIPROC_DIR", str(tmp_path))
    monkeypatch.setenv("PRIVACY_LEDGER_DATABASE_URL", f"sqlite:///{tmp_path / 'x.db'}")
    monkeypatch.delenv("WEB_CONCURRENCY", raising=False)
    get_settings.cache_clear()
    yield calls
    get_settings.cache_clear()


@pytest.mark.parametrize(
    ("args", "env", "workers"),
    [
        ([], {}, 1),
        ([], {"WEB_CONCURRENCY": "3"}, 3),
        (["--workers", "2"], {"WEB_CONCURRENCY": "3"}, 2),
    ],
)
def test_worker_count(
    started: list[dict[str, Any]], args: list[str], env: dict[str, str], workers: int
) -> None:
    result = CliRunner().invoke(cli, ["serve", *args], env=env)
    assert result.exit_code == 0, result.output
    assert [(c["app"], c["workers"]) for c in started] == [("app.main:app", workers)]


def test_a_bad_web_concurrency_is_refused(started: list[dict[str, Any]]) -> None:
    result = CliRunner().invoke(cli, ["serve"], env={"WEB_CONCURRENCY": "0"})
    assert result.exit_code == 2 and not started
    assert "Invalid value for '--workers'" in result.output


@pytest.mark.parametrize(
    ("port", "bound"),
    [
        ("99999", "less than or equal to 65535"),
        ("65536", "less than or equal to 65535"),
        ("0", "greater than or equal to 1"),
        ("-1", "greater than or equal to 1"),
    ],
)
def test_a_port_out_of_range_is_refused(
    started: list[dict[str, Any]], port: str, bound: str
) -> None:
    """uvicorn took 99999 (announced as such) and listened on 99999 mod 65536 = 34463; 0 was
    announced as :0 and bound a port chosen by the system."""
    result = CliRunner().invoke(cli, ["serve", "--port", port])
    assert result.exit_code == 2 and not started, result.output
    assert "Invalid value for '--port'" in result.output and bound in result.output


@pytest.mark.parametrize("port", ["1", "65535"])
def test_the_ends_of_the_port_range_are_served(started: list[dict[str, Any]], port: str) -> None:
    result = CliRunner().invoke(cli, ["serve", "--port", port])
    assert result.exit_code == 0, result.output
    assert [c["port"] for c in started] == [int(port)]
    assert f"http://127.0.0.1:{port} " in result.output
