"""``GET /calibrate``'s query parameters come from the registry (``app.api.calibrate_query``):
each scalar field of a kind with a parameter to calibrate is a query parameter of its name,
documented from the kinds; a kind registered later (``tests/toy_kind.py``, whose
``contributions`` no other kind has) is calibrated through the route without editing it."""

from __future__ import annotations

from typing import Any, Literal

import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter, ValidationError

from app.accounting import registry
from app.accounting.kinds._spec import KindSpec
from app.api import calibrate_query
from app.api.calibrate_query import calibrated_kind, calibrated_kinds, fixed_fields
from tests.conftest import new_dataset


def _calibrate(client: TestClient, ds: str, **params: Any) -> Any:
    return client.get(f"/v1/datasets/{ds}/calibrate", params=params)


@pytest.fixture
def ds(client: TestClient) -> str:
    made: dict[str, Any] = new_dataset(
        client, budget={"epsilon": 1.0, "delta": 1e-6}, adaptive=False
    )
    return str(made["id"])


def test_a_kind_registered_later_is_calibrated_with_a_field_of_a_new_name(
    client: TestClient, ds: str, toy_kind: KindSpec
) -> None:
    assert "contributions" not in calibrate_query._KNOWN  # not in the route's signature
    r = _calibrate(client, ds, mechanism=toy_kind.name, sensitivity=2, contributions=3)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["parameter"] == "scale" and answer["direction"] == "min"
    scale = answer["value"]
    assert answer["mechanism"] == {
        "mechanism": toy_kind.name,
        "scale": scale,
        "sensitivity": 2,
        "contributions": 3,
        "count": 1,
    }
    # the field is read: three times the contributions, three times the noise
    once = _calibrate(client, ds, mechanism=toy_kind.name, sensitivity=2).json()["value"]
    assert scale == pytest.approx(3 * once, rel=1e-6)
    # (no charge here: the API's request models are built at import, without the toy kind)
    assert registry.mechanism_from_dict(answer["mechanism"]).curve().pure_eps == pytest.approx(
        6 / scale
    )


def test_a_late_kinds_new_field_is_checked_as_the_signatures_are(
    client: TestClient, ds: str, toy_kind: KindSpec
) -> None:
    r = _calibrate(client, ds, mechanism=toy_kind.name, contributions=0)
    assert r.status_code == 422
    assert r.json()["detail"] == "query.contributions: Input should be greater than or equal to 1"
    r = _calibrate(client, ds, mechanism=toy_kind.name, contributions="many")
    assert r.status_code == 422 and r.json()["detail"].startswith("query.contributions: ")
    # a kind without the field refuses it, naming it, as any field it does not have
    r = _calibrate(client, ds, mechanism="gaussian", sensitivity=1, contributions=2)
    assert r.status_code == 422
    assert r.json()["detail"].startswith("gaussian has no parameter 'contributions'")


def test_without_the_late_kind_its_field_is_refused(client: TestClient, ds: str) -> None:
    r = _calibrate(client, ds, mechanism="gaussian", sensitivity=1, contributions=2)
    assert r.status_code == 422
    assert r.json()["detail"].startswith("gaussian has no parameter 'contributions'")
    r = _calibrate(client, ds, mechanism="toy_geometric")
    assert r.status_code == 422 and r.json()["detail"].startswith("query.mechanism: Input should")


def test_every_field_is_a_documented_query_parameter(client: TestClient) -> None:
    doc = client.get("/openapi.json").json()
    listed = {
        p["name"]: p
        for p in doc["paths"]["/v1/datasets/{dataset_id}/calibrate"]["get"]["parameters"]
    }
    fields = fixed_fields(calibrated_kinds())
    assert {"sensitivity", "sample_rate", "steps", "sigma", "k", "count", "delta", "xi"} <= set(
        fields
    )
    for name, params in fields.items():
        assert name in listed and listed[name]["in"] == "query" and not listed[name]["required"]
        for kind, p in params.items():
            assert kind in listed[name]["description"]
            assert p.help.rstrip(".") in listed[name]["description"]
    # the checks the hand-written parameters had, now derived from the kinds' ranges
    schema = {name: listed[name]["schema"]["anyOf"][0] for name in fields}
    assert schema["sensitivity"] == {"type": "number", "exclusiveMinimum": 0}
    assert schema["sigma"] == {"type": "number", "exclusiveMinimum": 0}
    assert schema["steps"] == {"type": "integer", "minimum": 1}
    assert schema["k"] == {"type": "integer", "minimum": 2}
    assert schema["count"] == {"type": "integer", "minimum": 1}
    assert schema["delta"] == {"type": "number", "minimum": 0, "exclusiveMaximum": 1}
    assert schema["xi"] == {"type": "number", "minimum": 0}
    assert schema["sample_rate"] == {
        "type": "number",
        "exclusiveMinimum": 0,
        "maximum": 1,
        "minimum": 2.0**-1022,
    }


def test_an_unknown_kind_is_refused_as_a_literal_of_the_kinds_is() -> None:
    names = tuple(s.name for s in calibrated_kinds())
    with pytest.raises(ValidationError) as literal:
        TypeAdapter(Literal[names]).validate_python("bogus")  # type: ignore[valid-type]
    with pytest.raises(ValidationError) as ours:
        TypeAdapter(calibrate_query.KindQuery).validate_python("bogus")
    assert ours.value.errors()[0]["msg"] == literal.value.errors()[0]["msg"]
    assert ours.value.errors()[0]["type"] == "literal_error"
    assert calibrated_kind("gaussian") == "gaussian"
