"""Ledger filters for budget structures: ``allocation`` (name or id) and ``block`` (entries
whose inclusive block range covers it), on the page listing and on the CSV / JSON Lines export,
which also carries each entry's allocation and block range."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from fastapi.testclient import TestClient

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
    lines = client.get(
        f"/v1/datasets/{ds}/ledger", params={"format": "jsonl", "allocation": "team-a"}
    ).text.splitlines()
    assert [json.loads(line)["seq"] for line in lines] == [a, c]


def test_bad_block_filters_are_422(client: TestClient) -> None:
    plain = new_dataset(client, name="plain")["id"]
    r = client.get(f"/v1/datasets/{plain}/ledger", params={"block": "2026-11-01"})
    assert r.status_code == 422 and "not partitioned" in r.json()["detail"], r.text
    daily = new_dataset(client, name="daily", partition={"unit": "day"})["id"]
    for fmt in ("json", "csv"):
        r = client.get(f"/v1/datasets/{daily}/ledger", params={"block": "2026-W48", "format": fmt})
        assert r.status_code == 422 and "day block key" in r.json()["detail"], r.text
