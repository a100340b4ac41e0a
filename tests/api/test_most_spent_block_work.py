"""The most-spent block of a partitioned dataset (``/budget``) and of each allocation
(``/allocations``) counts active holds, so every block holding budget is a candidate. A request
built one tally and ran one conversion per such block: 4 allocations of 27 holds over 366 days
each (9,882 held blocks) cost 2.9 s of CPU for one allocation list (an outside audit). A charge
or hold over a range adds the same curve to every block of it, so blocks share their sums: one
tally and one conversion per distinct sums now. Work is counted here, and the answer is checked
against the per-block search it replaces."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

import pytest
from fastapi.testclient import TestClient

from app.services import answers, partitions, tallies
from app.services.tallies import ALLOCATION_BLOCK, BLOCK, Tallies
from tests.conftest import new_allocation

HOLDS = [(date(2026, 1, 1), 40, 30.0), (date(2026, 1, 21), 40, 45.0), (date(2026, 3, 5), 30, 20.0)]
"""(first day, days, sigma) of each hold; the first two overlap for 20 days (Jan 21 - Feb 9),
the third overlaps neither."""


def _per_block_top(
    session: Any, kind: str, owner: str, keys: list[str], flt: Any
) -> tuple[str, float]:
    """The per-block search ``most_spent`` ran before: every candidate's tally converted."""
    every = Tallies("", flt.kind).blocks(session, kind, owner, keys, flt, lock=False)
    top = min(every, key=lambda t: (-answers.spend_with_holds(t).epsilon, str(t.key)))
    return str(top.key), answers.spend_with_holds(top).epsilon


@pytest.mark.parametrize("kind", [BLOCK, ALLOCATION_BLOCK])
def test_most_spent_converts_each_distinct_sum_once(
    client: TestClient, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    ds = client.post(
        "/v1/datasets",
        json={
            "name": "daily",
            "budget": {"epsilon": 5.0, "delta": 1e-6},
            "partition": {"unit": "day"},
        },
    ).json()["id"]
    new_allocation(client, ds, "team", 4.0)
    for first, days, sigma in HOLDS:
        last = first + timedelta(days=days - 1)
        r = client.post(
            f"/v1/datasets/{ds}/reservations",
            json={
                "mechanism": {"mechanism": "gaussian", "sigma": sigma},
                "allocation": "team",
                "ttl_seconds": 3600,
                "blocks": {"from": first.isoformat(), "to": last.isoformat()},
            },
        )
        assert r.status_code == 201, r.text
    r = client.post(
        f"/v1/datasets/{ds}/charges",
        json={
            "mechanism": {"mechanism": "laplace", "epsilon": 0.05},
            "allocation": "team",
            "blocks": {"from": "2026-01-10", "to": "2026-01-12"},
        },
    )
    assert r.status_code == 201, r.text
    # held blocks: 40 + 40 - 20 + 30 = 90; distinct sums: hold 1 alone, hold 1 + the charge, both
    # holds, hold 2 alone, hold 3 alone
    distinct = 5

    built = conversions = 0
    from_row, spend_with_holds = tallies._from_row, answers.spend_with_holds

    def counting_from_row(*args: Any) -> Any:
        nonlocal built
        built += 1
        return from_row(*args)

    def counting_spend(t: Any) -> Any:
        nonlocal conversions
        conversions += 1
        return spend_with_holds(t)

    db = client.app.state.db  # type: ignore[attr-defined]
    with db.read() as s:
        flt, owner = _owner(client, s, ds, kind)
        monkeypatch.setattr(tallies, "_from_row", counting_from_row)
        monkeypatch.setattr(answers, "spend_with_holds", counting_spend)
        tallies_ = Tallies(ds, flt.kind)
        top = partitions.most_spent(s, tallies_, kind, owner, flt)
        assert top is not None
        assert built == distinct + 1  # one per distinct sums, and the answer's own tally
        assert conversions == distinct
        keys = _candidates(s, kind, owner)
        assert len(keys) == 90
        monkeypatch.setattr(tallies, "_from_row", from_row)
        monkeypatch.setattr(answers, "spend_with_holds", spend_with_holds)
        expected_key, expected_spend = _per_block_top(s, kind, owner, keys, flt)
    assert top.key == expected_key
    assert answers.spend_with_holds(top).epsilon == expected_spend

    # the routes report that block
    budget = client.get(f"/v1/datasets/{ds}/budget").json()
    team = client.get(f"/v1/datasets/{ds}/allocations/team").json()
    shown = budget["blocks"]["most_spent"]["block"] if kind == BLOCK else team["most_spent_block"]
    assert shown == expected_key


def _owner(client: TestClient, session: Any, ds: str, kind: str) -> tuple[Any, str]:
    from app.principal import SYSTEM
    from app.services import state

    st = state.load(session, ds, SYSTEM)
    if kind == BLOCK:
        return st.filter, st.id
    team = Tallies(st.id, st.filter.kind).allocation(session, "team", lock=False)
    return team.filter, team.owner


def _candidates(session: Any, kind: str, owner: str) -> list[str]:
    from sqlalchemy import select

    table = tallies._TABLE[kind]
    column = table.c.dataset_id if kind == BLOCK else table.c.allocation_id
    return list(session.scalars(select(table.c.key).where(column == owner, table.c.held_count > 0)))
