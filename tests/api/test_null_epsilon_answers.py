"""A spend with no finite epsilon is ``null`` in every answer, and the answers say so.

Found by a randomized outside fuzz: where the entries' own deltas reach the delta (past a
partitioned dataset's ``entry_delta_budget`` across blocks, or a budget delta lowered below them
by PATCH), ``spent.epsilon`` is null, as docs/accounting.md says. But the response models
declared a number, so (1) a retry with the same ``Idempotency-Key``, which reads the stored
first answer back through the model, was a 500 instead of the first answer (DESIGN invariants 3
and 4), and (2) the OpenAPI schema promised a number where null came."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from fastapi.testclient import TestClient
from privacy_ledger_client._models import BudgetStatus, Charge, parse

from tests.conftest import new_dataset

OWN = {"mechanism": "approx_dp", "epsilon": 0.1, "delta": 8e-8}


def _spent_past_its_split(client: TestClient) -> str:
    """A day-partitioned dataset whose own deltas add up, over two blocks, past its split of
    1e-7: the dataset's spend (all blocks composed) has no finite epsilon."""
    ds = new_dataset(
        client,
        "past-split",
        budget={"epsilon": 1.0, "delta": 1e-6},
        partition={"unit": "day"},
        entry_delta_budget=1e-7,
    )
    url = f"/v1/datasets/{ds['id']}"
    for day in ("2026-11-01", "2026-11-02"):
        r = client.post(
            f"{url}/charges", json={"blocks": {"from": day, "to": day}, "mechanism": OWN}
        )
        assert r.status_code == 201, r.text
    assert r.json()["spent"]["epsilon"] is None
    return url


def test_a_retried_charge_or_reservation_answers_the_first_answer(client: TestClient) -> None:
    url = _spent_past_its_split(client)
    body = {
        "blocks": {"from": "2026-11-03", "to": "2026-11-03"},
        "mechanism": {"mechanism": "laplace", "epsilon": 0.1},
    }
    for path, key in (("charges", "c1"), ("reservations", "r1")):
        first = client.post(f"{url}/{path}", json=body, headers={"Idempotency-Key": key})
        assert first.status_code == 201, first.text
        assert first.json()["spent"]["epsilon"] is None
        again = client.post(f"{url}/{path}", json=body, headers={"Idempotency-Key": key})
        assert again.status_code == 201, again.text
        assert again.json() == first.json()
    charges = client.get(f"{url}/ledger").json()["entries"]
    assert len(charges) == 3  # the retry charged nothing more
    rid = first.json()["id"]
    committed = client.post(f"/v1/reservations/{rid}/commit")
    assert committed.status_code == 200, committed.text
    assert committed.json()["spent"]["epsilon"] is None


def _nullable(schema: dict[str, Any]) -> bool:
    options = schema.get("anyOf", [schema])
    return any(o.get("type") == "null" for o in options)


def test_the_schema_says_null_where_null_is_answered(client: TestClient) -> None:
    components = client.get("/openapi.json").json()["components"]["schemas"]
    assert _nullable(components["Spent"]["properties"]["epsilon"])
    assert _nullable(components["Entry"]["properties"]["spent_epsilon"])
    assert _nullable(components["Reserved"]["properties"]["epsilon"])
    assert _nullable(components["SeriesPoint"]["properties"]["epsilon"])


def test_a_budget_delta_lowered_below_the_own_deltas_reads_null(client: TestClient) -> None:
    """The other way there: PATCH lowers a non-adaptive dataset's delta below an entry's own
    delta. Every reading answers 200 with a null epsilon, and the client reads it."""
    ds = new_dataset(client, "lowered", budget={"epsilon": 10.0, "delta": 1e-6}, adaptive=False)
    url = f"/v1/datasets/{ds['id']}"
    charged = client.post(f"{url}/charges", json={"mechanism": OWN})
    assert charged.status_code == 201, charged.text
    parse(Charge, charged.json())
    r = client.patch(url, json={"budget": {"delta": 1e-8}})
    assert r.status_code == 200, r.text
    assert r.json()["spent"]["epsilon"] is None
    budget = client.get(f"{url}/budget")
    assert budget.status_code == 200 and budget.json()["spent"]["epsilon"] is None
    assert parse(BudgetStatus, budget.json()).spent.epsilon is None
    entries = client.get(f"{url}/ledger").json()["entries"]
    assert entries[0]["spent_epsilon"] is not None  # recorded under the budget of then
    for path in ("", "/ledger", "/series", "/curves"):
        assert client.get(url + path).status_code == 200, path


def test_the_csv_export_leaves_a_null_epsilon_empty_as_json_lines_does(
    client: TestClient,
) -> None:
    """An entry whose spend has no finite epsilon: JSON Lines says null, and the CSV leaves the
    cell empty (it wrote ``inf``, a value no JSON answer gives)."""
    url = _spent_past_its_split(client)
    lines = client.get(f"{url}/ledger", params={"format": "jsonl"})
    assert lines.status_code == 200, lines.text
    exact = [json.loads(line) for line in lines.text.splitlines()]
    assert exact[-1]["spent_epsilon"] is None
    table = client.get(f"{url}/ledger", params={"format": "csv"})
    assert table.status_code == 200, table.text
    rows = list(csv.DictReader(io.StringIO(table.text, newline="")))
    assert len(rows) == len(exact) == 2
    for row, entry in zip(rows, exact, strict=True):
        for column in ("rho", "pure_epsilon", "spent_epsilon"):
            value = entry[column]
            assert row[column] == ("" if value is None else repr(value)), column


def test_admin_changes_to_such_a_dataset_are_audited_with_a_null_epsilon(
    client: TestClient,
) -> None:
    """Renaming, re-budgeting and archiving a dataset whose spend has no finite epsilon: each
    is audited with the spend of then, which is null (an infinity is not JSON, and
    PostgreSQL's JSON column refuses it: ``app.db.engine.json_dumps`` writes null)."""
    url = _spent_past_its_split(client)
    for change in ({"name": "renamed"}, {"budget": {"epsilon": 2.0}}):
        r = client.patch(url, json=change)
        assert r.status_code == 200, r.text
    r = client.post(f"{url}/archive")
    assert r.status_code == 200, r.text
    events = client.get("/v1/audit", params={"dataset_id": url.rsplit("/", 1)[1]})
    assert events.status_code == 200, events.text
    recorded = [e for e in events.json()["events"] if "spent_epsilon" in e["details"]]
    assert len(recorded) == 3, events.json()
    assert all(e["details"]["spent_epsilon"] is None for e in recorded)
