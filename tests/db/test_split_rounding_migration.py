"""Migration 0011: the rules of split filters made under 0010 (for delta_B - D) are made again
for delta_B - D (1 + 2^-30), the room a rounded-up sum of the entries' deltas now has
(``filters.entry_delta_cap``), keeping their fixed orders; the stored spends are then rebuilt
once by ``migrate``'s re-derivation. Each test ends at head (the PostgreSQL database is reused).

Expected rules come from ``Filter.create`` at head (what a new dataset of that budget and split
gets), and the 0010 rule is rebuilt here from the smaller budget directly."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient
from sqlalchemy import create_engine, text

from app.accounting.adaptive import RenyiFilter
from app.accounting.filters import Budget, Filter, FilterKind
from app.accounting.rounding import sub_down
from app.db import migrate
from app.db.engine import Database
from app.main import create_app
from app.services import verification
from tests.conftest import ADMIN, make_settings, new_dataset

BUDGET = {"epsilon": 2.0, "delta": 1e-5}
SPLIT = 4e-6
APPROX = {"mechanism": {"mechanism": "approx_dp", "epsilon": 0.1, "delta": 1e-6}}


@contextmanager
def _client(url: str) -> Iterator[TestClient]:
    with TestClient(create_app(make_settings(url))) as c:
        c.headers.update(ADMIN)
        yield c


def _sql(url: str, statement: str, **params: Any) -> list[Any]:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            result = conn.execute(text(statement), params)
            return list(result.all()) if result.returns_rows else []
    finally:
        engine.dispose()


def _old_rule(kind: FilterKind, orders: Any) -> tuple[float | None, Any]:
    """The rule 0010 made: the plain filter for (eps_B, delta_B - D), orders kept."""
    old = Filter.create(
        kind, Budget(BUDGET["epsilon"], sub_down(BUDGET["delta"], SPLIT)), orders=orders
    )
    return old.bound, None if old.params is None else old.params.to_dict()


def test_split_rules_made_under_0010_are_made_again_and_the_totals_rebuilt(db_url: str) -> None:
    with _client(db_url) as c:
        made = {
            accounting: new_dataset(
                c,
                f"split-{accounting}",
                budget=BUDGET,
                accounting=accounting,
                entry_delta_budget=SPLIT,
            )
            for accounting in ("zcdp", "rdp")
        }
        plain = new_dataset(c, "plain", budget=BUDGET)
        rdp_id = made["rdp"]["id"]
        r = c.post(
            f"/v1/datasets/{rdp_id}/allocations",
            json={
                "name": "team",
                "budget": {"epsilon": 1.0, "delta": 5e-6},
                "entry_delta_budget": 2e-6,
            },
        )
        assert r.status_code == 201, r.text
        for ds in made.values():
            for _ in range(3):
                assert c.post(f"/v1/datasets/{ds['id']}/charges", json=APPROX).status_code == 201
        now = {ds["id"]: c.get(f"/v1/datasets/{ds['id']}").json() for ds in [*made.values(), plain]}
    plain_rule = _sql(
        db_url, "SELECT filter_bound, filter_params FROM dataset WHERE id = :i", i=plain["id"]
    )

    migrate.downgrade(db_url, "0010", force=True)
    try:
        # the rules as 0010 made them, and a spend as it stored it (converted at target - D)
        for ds in made.values():
            kind = FilterKind(ds["filter"])
            orders = ds["filter_params"]["orders"] if ds["filter_params"] else None
            bound, params = _old_rule(kind, orders)
            _sql(
                db_url,
                "UPDATE dataset SET filter_bound = :b, filter_params = :p WHERE id = :i",
                b=bound,
                p=None if params is None else json.dumps(params),
                i=ds["id"],
            )
            _sql(
                db_url,
                "UPDATE dataset_total SET spent_epsilon = spent_epsilon * (1 - 1e-9) "
                "WHERE dataset_id = :i",
                i=ds["id"],
            )
    finally:
        migrate.upgrade(db_url)

    for ds in made.values():
        [(bound, params)] = _sql(
            db_url, "SELECT filter_bound, filter_params FROM dataset WHERE id = :i", i=ds["id"]
        )
        params = json.loads(params) if isinstance(params, str) else params
        kind = FilterKind(ds["filter"])
        orders = ds["filter_params"]["orders"] if ds["filter_params"] else None
        fresh = Filter.create(kind, Budget(**BUDGET), orders=orders, entry_delta=SPLIT)
        assert bound == fresh.bound
        assert params == (None if fresh.params is None else fresh.params.to_dict())
        assert (bound, params) != _old_rule(kind, orders)
        if orders is not None:
            assert RenyiFilter.from_dict(params).orders == tuple(orders)  # kept
    # the allocation's rule too; a dataset without a split is untouched
    [(a_bound, a_params)] = _sql(
        db_url, "SELECT filter_bound, filter_params FROM allocation WHERE name = 'team'"
    )
    a_params = json.loads(a_params) if isinstance(a_params, str) else a_params
    team = Filter.create(
        FilterKind(made["rdp"]["filter"]),
        Budget(1.0, 5e-6),
        orders=RenyiFilter.from_dict(a_params).orders,
        entry_delta=2e-6,
    )
    assert a_params == team.params.to_dict()  # type: ignore[union-attr]
    assert (
        _sql(db_url, "SELECT filter_bound, filter_params FROM dataset WHERE id = :i", i=plain["id"])
        == plain_rule
    )

    # the stamp was cleared: the spends stored under the old rule are rebuilt once
    assert _sql(db_url, "SELECT value FROM app_setting WHERE key = 'curve_formulas_version'") == []
    db = Database(db_url)
    try:
        assert verification.formulas_behind(db) is not None
        report = verification.rederive_if_formulas_changed(db)
        assert report is not None and report.ok is False  # the spends had drifted: rebuilt
        assert verification.formulas_behind(db) is None
        assert verification.rederive_if_formulas_changed(db) is None  # once
    finally:
        db.dispose()
    with _client(db_url) as c:
        for ds in made.values():
            after = c.get(f"/v1/datasets/{ds['id']}").json()
            assert after["spent"]["epsilon"] == now[ds["id"]]["spent"]["epsilon"]
            # four of 1e-6 fit the split of 4e-6: the fourth is admitted
            r = c.post(f"/v1/datasets/{ds['id']}/charges", json=APPROX)
            assert r.status_code == 201, r.text
