"""Time filters compare instants: the same instant written with any UTC offset selects the same
rows, on SQLite (which stores a time's UTC digits without an offset) as on PostgreSQL.

Each check puts the bound exactly on a stored row's ``created_at`` (the filters are inclusive)
and one microsecond past it, written as ``Z``, ``+05:00`` and ``-05:00``: the row is in on the
bound and out past it, whatever the offset. No clock is read: the bounds come from the rows.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from fastapi.testclient import TestClient

from tests.conftest import new_dataset

ZONES = {
    "Z": UTC,
    "+05:00": timezone(timedelta(hours=5)),
    "-05:00": timezone(timedelta(hours=-5)),
}
TICK = timedelta(microseconds=1)


def _written(ts: datetime, zone: str) -> str:
    text = ts.astimezone(ZONES[zone]).isoformat()
    return text.replace("+00:00", "Z") if zone == "Z" else text


def _ids(client: TestClient, path: str, params: dict[str, Any]) -> set[Any]:
    r = client.get(path, params=params)
    assert r.status_code == 200, (path, params, r.text)
    if params.get("format") == "jsonl":
        return {json.loads(line)["id"] for line in r.text.splitlines()}
    body = r.json()
    rows = body.get("events", body.get("entries", body.get("rejections")))
    return {row["id"] for row in rows}


def _a_ledger_with_a_refusal(client: TestClient) -> tuple[str, str]:
    ds = new_dataset(client, budget={"epsilon": 1.0, "delta": 1e-5})["id"]
    admitted = client.post(
        f"/v1/datasets/{ds}/charges",
        json={"mechanism": {"mechanism": "gaussian", "sigma": 50.0}, "label": "a"},
    )
    assert admitted.status_code == 201, admitted.text
    refused = client.post(
        f"/v1/datasets/{ds}/charges",
        json={"mechanism": {"mechanism": "pure_dp", "epsilon": 50.0}, "label": "b"},
    )
    assert refused.status_code == 409, refused.text
    return ds, admitted.json()["entry"]["id"]


ROUTES = {  # name: (path under {ds}, fixed params, lower bound, upper bound, what it lists)
    "audit": ("/v1/audit", {"dataset": "{ds}"}, "since", "until", "events"),
    "rejections": ("/v1/rejections", {"dataset": "{ds}"}, "since", "until", "rejections"),
    "dataset-rejections": (
        "/v1/datasets/{ds}/rejections",
        {},
        "created_after",
        "created_before",
        "rejections",
    ),
    "ledger": ("/v1/datasets/{ds}/ledger", {}, "created_after", "created_before", "entries"),
    "ledger-export": (
        "/v1/datasets/{ds}/ledger",
        {"format": "jsonl"},
        "created_after",
        "created_before",
        "entries",
    ),
}


def _route(name: str, ds: str) -> tuple[str, dict[str, Any], str, str, str]:
    path, fixed, lower, upper, listed = ROUTES[name]
    return (
        path.format(ds=ds),
        {k: v.format(ds=ds) for k, v in fixed.items()},
        lower,
        upper,
        listed,
    )


@pytest.mark.parametrize("route", ROUTES)
def test_the_same_instant_in_any_offset_selects_the_same_rows(
    client: TestClient, route: str
) -> None:
    ds, _ = _a_ledger_with_a_refusal(client)
    path, fixed, lower, upper, listed = _route(route, ds)
    page = {k: v for k, v in fixed.items() if k != "format"}  # the JSON page names a row
    pivot = client.get(path, params=page).json()[listed][0]
    at = datetime.fromisoformat(pivot["created_at"].replace("Z", "+00:00"))
    for zone in ZONES:
        on, past, before = (_written(t, zone) for t in (at, at + TICK, at - TICK))
        assert pivot["id"] in _ids(client, path, {**fixed, lower: on}), zone
        assert pivot["id"] in _ids(client, path, {**fixed, upper: on}), zone
        assert pivot["id"] in _ids(client, path, {**fixed, lower: on, upper: on}), zone
        assert pivot["id"] not in _ids(client, path, {**fixed, lower: past}), zone
        assert pivot["id"] not in _ids(client, path, {**fixed, upper: before}), zone


def test_a_time_without_an_offset_is_utc(client: TestClient) -> None:
    ds, entry = _a_ledger_with_a_refusal(client)
    path = f"/v1/datasets/{ds}/ledger"
    at = datetime.fromisoformat(
        client.get(path).json()["entries"][0]["created_at"].replace("Z", "+00:00")
    )
    naive = at.replace(tzinfo=None)
    assert entry in _ids(client, path, {"created_after": naive.isoformat()})
    assert entry not in _ids(client, path, {"created_after": (naive + TICK).isoformat()})


def test_offsets_at_the_ends_of_the_calendar_select_everything(client: TestClient) -> None:
    """``0001-01-01T00:00+14:00`` is before the first representable UTC time, and
    ``9999-12-31T23:59:59-14:00`` after the last: no 5xx, and every row is on the right side."""
    ds, entry = _a_ledger_with_a_refusal(client)
    first, last = "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00"
    for route in ROUTES:
        path, fixed, lower, upper, _ = _route(route, ds)
        everything = _ids(client, path, fixed)
        assert everything, path
        assert _ids(client, path, {**fixed, lower: first, upper: last}) == everything, path
        assert _ids(client, path, {**fixed, upper: first}) == set(), path
        assert _ids(client, path, {**fixed, lower: last}) == set(), path
    assert entry in _ids(client, f"/v1/datasets/{ds}/ledger", {"created_after": first})
