"""Issue 10, item 6: dataset names follow one documented rule, so each is reachable by name.

A name never looks like an id (``ds_...``), never holds ``/``, is never ``.`` or ``..``; bad
names are 422 on create and on PATCH and nothing is stored. Datasets that got such a name before
the rule keep working by id.
"""

from __future__ import annotations

from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from app.api.dataset_names import NAME_PATTERN
from app.services import datasets as dataset_service
from app.services.keys import SYSTEM
from tests.conftest import new_dataset
from tests.snapshot import Watcher, changed_tables

BUDGET = {"epsilon": 1.0, "delta": 1e-6}
GOOD = ["census", "a", "Sales 2026", "team.a:b-c_d", "DSX", "ds-1", "d_s_x", "9", "n" * 200, "x."]
BAD = [
    "ds_0123456789abcdef",  # an id's shape: would shadow or be shadowed by an id
    "ds_census",
    "DS_census",
    "Ds_",
    "a/b",
    "/",
    ".",
    "..",
    "../etc",
    "a b ",  # trailing space
    " a",
    "",
    "n" * 201,
    "-a",
    "_a",
    "a?b",
    "a#b",
    "a%2Fb",
    "caf\u00e9",
    "a\nb",
    "a\tb",
]


def test_rule_is_published_in_the_openapi_schema(client: TestClient) -> None:
    schema = client.get("/openapi.json").json()["components"]["schemas"]["DatasetIn"]
    name = schema["properties"]["name"]
    assert name["pattern"] == NAME_PATTERN and name["not"] == {"pattern": "^[Dd][Ss]_"}
    assert "ds_" in name["description"]


def test_good_names_are_reachable_by_name(client: TestClient) -> None:
    for name in GOOD:
        d = new_dataset(client, name)
        r = client.get(f"/v1/datasets/{quote(name, safe='')}")
        assert r.status_code == 200 and r.json()["id"] == d["id"], name


def test_bad_names_are_422_on_create_and_patch(client: TestClient, db_url: str) -> None:
    d = new_dataset(client, "kept")
    watcher = Watcher(db_url)
    try:
        before = watcher.take()
        for name in BAD:
            r = client.post("/v1/datasets", json={"name": name, "budget": BUDGET})
            assert r.status_code == 422 and "name" in r.json()["detail"], (name, r.text)
            r = client.patch(f"/v1/datasets/{d['id']}", json={"name": name})
            assert r.status_code == 422 and "name" in r.json()["detail"], (name, r.text)
        assert changed_tables(before, watcher.take()) == []
    finally:
        watcher.close()


def test_a_name_cannot_be_another_datasets_id(client: TestClient) -> None:
    first = new_dataset(client, "first")
    r = client.post("/v1/datasets", json={"name": first["id"], "budget": BUDGET})
    assert r.status_code == 422 and "dataset id" in r.json()["detail"]
    assert client.get(f"/v1/datasets/{first['id']}").json()["name"] == "first"


@pytest.mark.parametrize("legacy", ["ds_0000000000000001", "team/a", ".."])
def test_datasets_named_before_the_rule_keep_working_by_id(client: TestClient, legacy: str) -> None:
    db = client.app.state.db  # type: ignore[attr-defined]
    d = dataset_service.create_dataset(
        db, SYSTEM, name=legacy, budget_epsilon=1.0, budget_delta=1e-6
    )  # the service does not police names: the API does
    base = f"/v1/datasets/{d.id}"
    assert client.get(base).json()["name"] == legacy
    charge = {"mechanism": {"mechanism": "laplace", "epsilon": 0.1}}
    assert client.post(f"{base}/charges", json=charge).status_code == 201
    assert client.patch(base, json={"description": "still here"}).status_code == 200
    assert client.get(f"{base}/budget").json()["entries"] == 1
    assert legacy in [x["name"] for x in client.get("/v1/datasets").json()["datasets"]]
    # and it can be given a good name
    renamed = client.patch(base, json={"name": "renamed"})
    assert renamed.status_code == 200 and client.get("/v1/datasets/renamed").json()["id"] == d.id
