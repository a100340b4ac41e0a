"""Ledger filters for budget structures: ``allocation`` (an ``al_`` id, else a name) and ``block`` (entries
whose inclusive block range covers it), on the page listing and on the CSV / JSON Lines export,
which also carries each entry's allocation and block range."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from fastapi.testclient import TestClient

from app.principal import SYSTEM
from app.services import allocations
from tests.conftest import new_dataset


def _charge(client: TestClient, ds: str, first: str, last: str, **extra: Any) -> int:
    r = client.post(
        f"/v1/datasets/{ds}/charges",
        json={
            "mechanism": {"mechanism": "laplace", "epsilon": 0.05},
            "blocks": {"from": first, "to": last},
            **extra,
        },
    )
    assert r.status_code == 201, r.text
    return int(r.json()["entry"]["seq"])


def _seqs(client: TestClient, ds: str, **params: str) -> list[int]:
    r = client.get(f"/v1/datasets/{ds}/ledger", params=params)
    assert r.status_code == 200, r.text
    return [e["seq"] for e in r.json()["entries"]]


def test_allocation_and_block_filters(client: TestClient) -> None:
    ds = new_dataset(
        client, name="clicks", budget={"epsilon": 1.0, "delta": 1e-6}, partition={"unit": "day"}
    )["id"]
    made = client.post(
        f"/v1/datasets/{ds}/allocations",
        json={"name": "team-a", "budget": {"epsilon": 0.5, "delta": 1e-6}},
    )
    assert made.status_code == 201, made.text
    a = _charge(client, ds, "2026-11-01", "2026-11-03", allocation="team-a")
    b = _charge(client, ds, "2026-11-03", "2026-11-03")
    c = _charge(client, ds, "2026-11-05", "2026-11-05", allocation="team-a")

    assert _seqs(client, ds, allocation="team-a") == [c, a]
    assert _seqs(client, ds, allocation=made.json()["id"]) == [c, a]
    assert _seqs(client, ds, allocation="no-such-team") == []
    assert _seqs(client, ds, block="2026-11-03") == [b, a]
    assert _seqs(client, ds, block="2026-11-01") == [a]
    assert _seqs(client, ds, block="2026-11-04") == []
    assert _seqs(client, ds, block="2026-11-05") == [c]
    assert _seqs(client, ds, allocation="team-a", block="2026-11-03") == [a]

    text = client.get(
        f"/v1/datasets/{ds}/ledger", params={"format": "csv", "block": "2026-11-03"}
    ).text
    rows = list(csv.DictReader(io.StringIO(text)))
    assert [int(row["seq"]) for row in rows] == [a, b]  # oldest first
    assert (rows[0]["allocation_id"], rows[0]["block_from"], rows[0]["block_to"]) == (
        made.json()["id"],
        "2026-11-01",
        "2026-11-03",
    )
    assert rows[1]["allocation_id"] == "" and rows[1]["block_from"] == "2026-11-03"
    assert (rows[0]["allocation_name"], rows[1]["allocation_name"]) == ("team-a", "")
    lines = client.get(
        f"/v1/datasets/{ds}/ledger", params={"format": "jsonl", "allocation": "team-a"}
    ).text.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [a, c]
    assert {json.loads(line)["allocation_name"] for line in lines} == {"team-a"}
    page = client.get(f"/v1/datasets/{ds}/ledger").json()["entries"]
    assert {e["seq"]: e["allocation_name"] for e in page} == {a: "team-a", b: None, c: "team-a"}


def test_bad_block_filters_are_422(client: TestClient) -> None:
    plain = new_dataset(client, name="plain")["id"]
    r = client.get(f"/v1/datasets/{plain}/ledger", params={"block": "2026-11-01"})
    assert r.status_code == 422 and "not partitioned" in r.json()["detail"], r.text
    daily = new_dataset(client, name="daily", partition={"unit": "day"})["id"]
    for fmt in ("json", "csv"):
        r = client.get(f"/v1/datasets/{daily}/ledger", params={"block": "2026-W48", "format": fmt})
        assert r.status_code == 422 and "day block key" in r.json()["detail"], r.text


def test_an_allocation_name_may_not_look_like_an_allocation_id(client: TestClient) -> None:
    """An allocation named like another's id (``al_...``) made ``?allocation=<id>`` match both
    allocations, in the page and the exports (audit h2, F2): such names are 422, in any case,
    as dataset names starting with ``ds_`` are."""
    ds = new_dataset(client, name="clicks")["id"]
    budget = {"epsilon": 0.5, "delta": 1e-6}
    team_b = client.post(
        f"/v1/datasets/{ds}/allocations", json={"name": "team-b", "budget": budget}
    )
    assert team_b.status_code == 201, team_b.text
    for name in (team_b.json()["id"], "al_census", "AL_x", "Al_"):
        r = client.post(f"/v1/datasets/{ds}/allocations", json={"name": name, "budget": budget})
        assert r.status_code == 422, (name, r.text)
        assert "allocation id" in r.json()["detail"] and "al_" in r.json()["detail"], r.text
    names = [a["name"] for a in client.get(f"/v1/datasets/{ds}/allocations").json()["allocations"]]
    assert names == ["team-b"]
    # the rule is published beside the dataset name's
    schema = client.get("/openapi.json").json()["components"]["schemas"]["AllocationIn"]
    assert schema["properties"]["name"]["not"] == {"pattern": "^[Aa][Ll]_"}


def test_the_allocation_filter_matches_one_allocation(client: TestClient) -> None:
    """An allocation named like team-b's id before the rule (the service does not police
    names): ``?allocation=<team-b's id>`` lists team-b's entries only, on the page and in both
    exports; the other allocation stays reachable by its own id."""
    ds = new_dataset(client, name="clicks")["id"]
    budget = {"epsilon": 0.5, "delta": 1e-6}
    team_b = client.post(
        f"/v1/datasets/{ds}/allocations", json={"name": "team-b", "budget": budget}
    )
    b_id = team_b.json()["id"]
    db = client.app.state.db  # type: ignore[attr-defined]
    shadow = allocations.create_allocation(db, SYSTEM, ds, name=b_id, epsilon=0.5, delta=1e-6)
    laplace = {"mechanism": "laplace", "epsilon": 0.1}
    first = client.post(
        f"/v1/datasets/{ds}/charges", json={"mechanism": laplace, "allocation": "team-b"}
    )
    second = client.post(
        f"/v1/datasets/{ds}/charges", json={"mechanism": laplace, "allocation": b_id}
    )
    assert first.status_code == second.status_code == 201
    b_seq, shadow_seq = first.json()["entry"]["seq"], second.json()["entry"]["seq"]
    assert second.json()["allocation"]["id"] == shadow.id  # charged by name: the shadowing one

    assert _seqs(client, ds, allocation=b_id) == [b_seq]
    assert _seqs(client, ds, allocation="team-b") == [b_seq]
    assert _seqs(client, ds, allocation=shadow.id) == [shadow_seq]
    csv_rows = list(
        csv.DictReader(
            io.StringIO(
                client.get(
                    f"/v1/datasets/{ds}/ledger", params={"format": "csv", "allocation": b_id}
                ).text
            )
        )
    )
    assert [(int(r["seq"]), r["allocation_id"]) for r in csv_rows] == [(b_seq, b_id)]
    jsonl = client.get(f"/v1/datasets/{ds}/ledger", params={"format": "jsonl", "allocation": b_id})
    rows = [json.loads(line) for line in jsonl.text.splitlines()]
    assert [(r["seq"], r["allocation_id"]) for r in rows] == [(b_seq, b_id)]


def test_a_kind_no_mechanism_has_is_422_not_an_empty_ledger(client: TestClient) -> None:
    """``?kind=gausian`` answered an empty page (and the CLI an empty table, exit 0): a typo
    read as "no entries" (an outside check of the CLI). A kind of the registry still filters."""
    ds = new_dataset(client, name="typo")["id"]
    r = client.post(
        f"/v1/datasets/{ds}/charges", json={"mechanism": {"mechanism": "gaussian", "sigma": 20.0}}
    )
    assert r.status_code == 201, r.text
    for fmt in (None, "csv", "jsonl"):
        params = {"kind": "gausian", **({"format": fmt} if fmt else {})}
        bad = client.get(f"/v1/datasets/{ds}/ledger", params=params)
        assert bad.status_code == 422, bad.text
        assert "'gausian'" in bad.json()["detail"] and "gaussian" in bad.json()["detail"]
    assert _seqs(client, ds, kind="gaussian") == [1]
    assert _seqs(client, ds, kind="laplace") == []
