"""A partitioned dataset holds at most ``blocks.MAX_BLOCKS`` block rows (audit bounds45 F1).

Each charge may cover up to 366 days anywhere from year 1 to 9999, so a pipeline key could make
a dataset hold any number of block rows (1,000 charges made 366,000: ``GET /budget`` then cost
1.1-1.3 s of CPU in its block counts, and ``PATCH`` of the budget, which recomputes every
block's spend under the dataset's lock, about 86 us of CPU per block: 3.2 s for 36,600 blocks).
A charge, dry run or reservation that would add block rows past the limit is a 422 naming it;
one within blocks that exist is unaffected. The work of a budget change is counted here in
tallies rebudgeted, never timed."""

from __future__ import annotations

from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.services import blocks, tallies
from tests.conftest import new_dataset, run_sql

LIMIT = 40
GAUSS = {"mechanism": "gaussian", "sigma": 50.0}


def _charge(
    client: TestClient, ds: str, first: str, last: str, path: str = "charges", **extra: Any
) -> Any:
    body = {"mechanism": GAUSS, "blocks": {"from": first, "to": last}, **extra}
    return client.post(f"/v1/datasets/{ds}/{path}", json=body)


@pytest.fixture
def partitioned(client: TestClient, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setattr(blocks, "MAX_BLOCKS", LIMIT)
    ds = new_dataset(
        client, "daily", budget={"epsilon": 100.0, "delta": 1e-6}, partition={"unit": "day"}
    )["id"]
    assert _charge(client, ds, "2026-01-01", "2026-01-31").status_code == 201
    r = client.post(
        f"/v1/datasets/{ds}/reservations",
        json={"mechanism": GAUSS, "blocks": {"from": "2026-02-01", "to": "2026-02-09"}},
    )
    assert r.status_code == 201, r.text  # holds make block rows too: 31 + 9 = LIMIT
    return str(ds)


def _rows(db_url: str, ds: str) -> int:
    return int(
        run_sql(db_url, "SELECT count(*) FROM dataset_block WHERE dataset_id = :d", d=ds)[0][0]
    )


def test_new_blocks_past_the_limit_are_refused_and_change_nothing(
    client: TestClient, db_url: str, partitioned: str
) -> None:
    ds = partitioned
    assert _rows(db_url, ds) == LIMIT
    entries = client.get(f"/v1/datasets/{ds}/budget").json()["entries"]
    for path, extra in (("charges", {}), ("charges?dry_run=true", {}), ("reservations", {})):
        r = _charge(client, ds, "2026-02-05", "2026-02-10", path, **extra)  # one new block
        assert r.status_code == 422, (path, r.text)
        problem = r.json()
        assert problem["max_blocks"] == LIMIT and str(LIMIT) in problem["detail"]
        assert "2026-02-10" in problem["detail"]
    assert _rows(db_url, ds) == LIMIT
    assert client.get(f"/v1/datasets/{ds}/budget").json()["entries"] == entries
    # blocks that exist still take charges, dry runs and reservations
    assert _charge(client, ds, "2026-01-05", "2026-02-09").status_code == 201
    assert (
        _charge(client, ds, "2026-01-05", "2026-01-06", "charges?dry_run=true").status_code == 200
    )
    assert _charge(client, ds, "2026-02-01", "2026-02-02", "reservations").status_code == 201
    assert _rows(db_url, ds) == LIMIT


def test_a_budget_change_rebudgets_at_most_the_limit(
    client: TestClient, partitioned: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ds = partitioned
    for first, last in (("2027-01-01", "2027-12-31"), ("1900-03-01", "1900-03-02")):
        assert _charge(client, ds, first, last).status_code == 422
    rebudgeted: list[Any] = []
    real = tallies.Tallies.set_filter

    def counted(self: Any, t: Any, flt: Any) -> None:
        rebudgeted.append(t.key)
        real(self, t, flt)

    monkeypatch.setattr(tallies.Tallies, "set_filter", counted)
    r = client.patch(f"/v1/datasets/{ds}", json={"budget": {"epsilon": 50.0}})
    assert r.status_code == 200, r.text
    assert len(rebudgeted) == LIMIT == len(set(rebudgeted))
