"""``privacy-ledger verify`` here (``--database-url``: the command opens the database itself)
and on the server, on SQLite and (in CI) PostgreSQL, through typer's runner against the app in
this process (as test_commands.py)."""

from __future__ import annotations

import pytest

from tests.cli.conftest import Cli


def test_verify_here_and_on_the_server(run: Cli, db_url: str) -> None:
    run.dataset()
    run("charge", "census", "-m", "gaussian", "--sigma", "30")
    here = run.json("verify", "--database-url", db_url)
    assert here["ok"] and [d["entries"] for d in here["datasets"]] == [1]
    remote = run.json("verify", "--server")
    assert remote["ok"] and [d["name"] for d in remote["datasets"]] == ["census"]
    assert "all totals match the ledger" in run("verify", "--database-url", db_url).stdout


def test_verify_here_checks_archived_datasets_too(run: Cli, db_url: str) -> None:
    """An archived dataset keeps its ledger and totals: verify (here, as on the server) checks
    them; it listed only the datasets that are not archived."""
    run.dataset()
    run("charge", "census", "-m", "gaussian", "--sigma", "30")
    assert run.client.post("/v1/datasets/census/archive").status_code == 200
    here = run.json("verify", "--database-url", db_url)
    remote = run.json("verify", "--server")
    assert [d["name"] for d in here["datasets"]] == [d["name"] for d in remote["datasets"]]
    assert [d["entries"] for d in here["datasets"]] == [1]


def test_verify_progress_bar_advances_within_a_dataset_and_counts_the_ledger(
    run: Cli, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``verify`` here draws its bar from the service's progress: it advances while one dataset's
    ledger is read, page by page (it stood at 0 until the whole dataset was done, so a single
    100,000-entry dataset showed no progress at all), and its total is the ledger's length, not
    the stored totals' ``entries`` (zero on the stale totals ``--rebuild`` exists for)."""
    from rich.progress import Progress
    from sqlalchemy import create_engine, text

    from app.cli import server
    from app.services import verification

    monkeypatch.setattr(verification, "READ_CHUNK", 2)  # several pages from a short ledger
    ds = run.dataset()
    for i in range(6):
        run("charge", "census", "-m", "laplace", "--epsilon", str(0.01 + i * 0.001))
    engine = create_engine(db_url)
    try:
        with engine.begin() as conn:  # stale totals: what --rebuild repairs
            conn.execute(
                text("UPDATE dataset_total SET entry_count = 0 WHERE dataset_id = :d"),
                {"d": ds["id"]},
            )
    finally:
        engine.dispose()
    seen: list[tuple[float, float | None]] = []

    class Recording(Progress):
        def update(self, task_id, **kwargs):  # type: ignore[no-untyped-def]
            super().update(task_id, **kwargs)
            seen.append((self.tasks[0].completed, self.tasks[0].total))

        def advance(self, task_id, advance=1):  # type: ignore[no-untyped-def]
            super().advance(task_id, advance)
            seen.append((self.tasks[0].completed, self.tasks[0].total))

    monkeypatch.setattr(server, "Progress", Recording)
    assert "census" in run("verify", "--rebuild", "--database-url", db_url).stdout
    completed = [c for c, _ in seen]
    assert completed == sorted(completed)
    assert len({c for c in completed if 0 < c < 6}) >= 2  # moved while the dataset was read
    assert seen[-1] == (6, 6)  # the ledger's six entries, though the totals said none
