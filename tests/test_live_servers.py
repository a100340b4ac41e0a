"""tests/live.py: the uvicorn servers that tests start."""

from __future__ import annotations

import shutil
from pathlib import Path

import httpx
import pytest

from tests import live
from tests.conftest import ADMIN, ADMIN_KEY, new_dataset


def test_a_server_whose_port_was_taken_meanwhile_starts_on_another_port(
    sqlite_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``free_port`` gives a port that is free only until the server binds it: under xdist the
    other worker may take it in between (its own ``free_port`` gave the same port, and its
    server bound it first). The server then could not bind and exited, but Server.start called
    it ready at the first ``/readyz`` the other worker's server answered on that port, and
    the test went on with the other worker's server and database. Made deterministic:
    ``free_port`` first gives the port of a running server."""
    other = tmp_path / "other.db"
    shutil.copy(sqlite_url.removeprefix("sqlite:///"), other)
    with live.running(sqlite_url, ADMIN_KEY) as first:
        with httpx.Client(base_url=first.url, headers=ADMIN, timeout=120) as c:
            new_dataset(c, "first-only")  # type: ignore[arg-type]
        taken = iter([first.port])
        real_free_port = live.free_port
        monkeypatch.setattr(live, "free_port", lambda: next(taken, None) or real_free_port())
        with live.running(f"sqlite:///{other}", ADMIN_KEY) as second:
            assert second.port != first.port
            assert second.proc is not None and second.proc.poll() is None
            with httpx.Client(base_url=second.url, headers=ADMIN, timeout=120) as c:
                assert c.get("/v1/datasets").json()["datasets"] == []  # its own database
