"""The permission matrix: every endpoint x every kind of caller -> the expected status.

A new endpoint without a row in ENDPOINTS fails ``test_every_route_is_in_the_matrix``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from fastapi.routing import APIRoute
from fastapi.testclient import TestClient
from starlette.routing import Route

from app.main import ROUTERS
from tests.conftest import ADMIN, new_dataset

NONE, VIEWER, PIPELINE, ADMIN_ROLE = "none", "viewer", "pipeline", "admin"
RANK = {VIEWER: 0, PIPELINE: 1, ADMIN_ROLE: 2}


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str
    role: str  # least role needed (NONE: public)
    scoped: bool  # addresses one dataset (a key scoped elsewhere gets 404)
    ok: int  # status of a successful call


ENDPOINTS = [
    Endpoint("GET", "/healthz", NONE, False, 200),
    Endpoint("GET", "/readyz", NONE, False, 200),
    Endpoint("POST", "/v1/accounting/compose", VIEWER, False, 200),
    Endpoint("POST", "/v1/datasets", ADMIN_ROLE, False, 201),
    Endpoint("GET", "/v1/datasets", VIEWER, False, 200),
    Endpoint("GET", "/v1/datasets/{dataset_id}", VIEWER, True, 200),
    Endpoint("PATCH", "/v1/datasets/{dataset_id}", ADMIN_ROLE, True, 200),
    Endpoint("POST", "/v1/datasets/{dataset_id}/charges", PIPELINE, True, 201),
    Endpoint("GET", "/v1/datasets/{dataset_id}/ledger", VIEWER, True, 200),
    Endpoint("GET", "/v1/datasets/{dataset_id}/budget", VIEWER, True, 200),
    Endpoint("GET", "/v1/datasets/{dataset_id}/spend", VIEWER, True, 200),
    Endpoint("GET", "/v1/datasets/{dataset_id}/calibrate", VIEWER, True, 200),
    Endpoint("GET", "/v1/datasets/{dataset_id}/series", VIEWER, True, 200),
    Endpoint("GET", "/v1/datasets/{dataset_id}/curves", VIEWER, True, 200),
    Endpoint("GET", "/v1/datasets/{dataset_id}/rejections", VIEWER, True, 200),
    Endpoint("POST", "/v1/datasets/{dataset_id}/archive", ADMIN_ROLE, True, 200),
    Endpoint("POST", "/v1/datasets/{dataset_id}/unarchive", ADMIN_ROLE, True, 200),
    Endpoint("POST", "/v1/datasets/{dataset_id}/charges/dp_event", PIPELINE, True, 201),
    Endpoint("POST", "/v1/datasets/{dataset_id}/allocations", ADMIN_ROLE, True, 201),
    Endpoint("GET", "/v1/datasets/{dataset_id}/allocations", VIEWER, True, 200),
    Endpoint("GET", "/v1/datasets/{dataset_id}/allocations/{name}", VIEWER, True, 200),
    Endpoint("PATCH", "/v1/datasets/{dataset_id}/allocations/{name}", ADMIN_ROLE, True, 200),
    # the World's datasets are not partitioned: the 422 saying so comes after the key and its
    # scope are checked (401 / 403 / 404 first)
    Endpoint("GET", "/v1/datasets/{dataset_id}/blocks", VIEWER, True, 422),
    Endpoint("GET", "/v1/mechanisms", VIEWER, False, 200),
    Endpoint("POST", "/v1/datasets/{dataset_id}/reservations", PIPELINE, True, 201),
    Endpoint("GET", "/v1/datasets/{dataset_id}/reservations", VIEWER, True, 200),
    Endpoint("GET", "/v1/reservations/{reservation_id}", VIEWER, True, 200),
    Endpoint("POST", "/v1/reservations/{reservation_id}/commit", PIPELINE, True, 200),
    Endpoint("DELETE", "/v1/reservations/{reservation_id}", PIPELINE, True, 200),
    Endpoint("POST", "/v1/keys", ADMIN_ROLE, False, 201),
    Endpoint("GET", "/v1/keys", ADMIN_ROLE, False, 200),
    Endpoint("DELETE", "/v1/keys/{key_id}", ADMIN_ROLE, True, 200),  # a key scoped to the dataset
    Endpoint("GET", "/v1/rejections", ADMIN_ROLE, False, 200),
    Endpoint("GET", "/v1/audit", ADMIN_ROLE, False, 200),
    Endpoint("POST", "/v1/admin/verify", ADMIN_ROLE, False, 200),
]
# extra public routes: documentation, dashboard and metrics (if present)
PUBLIC_EXTRA = {"/openapi.json", "/docs", "/docs/oauth2-redirect", "/redoc", "/metrics", "/"}


def test_every_route_is_in_the_matrix(client: TestClient) -> None:
    """The app's own routes and those of every router it includes: ``client.app.routes`` lists
    an included router as one entry (not an ``APIRoute``), so walking it alone saw none of the
    API's routes and this test passed with a dozen of them missing from the matrix."""
    known = {(e.method, e.path) for e in ENDPOINTS}
    missing = []
    routes = [*client.app.routes, *(r for router in ROUTERS for r in router.routes)]  # type: ignore[attr-defined]
    assert ("POST", "/v1/datasets/{dataset_id}/charges") in {
        (m, r.path) for r in routes if isinstance(r, APIRoute) for m in r.methods
    }
    for route in routes:
        if (
            isinstance(route, APIRoute | Route)
            and route.path not in PUBLIC_EXTRA
            and not route.path.startswith("/static")
        ):
            for method in route.methods or ():
                if method not in ("HEAD", "OPTIONS") and (method, route.path) not in known:
                    missing.append((method, route.path))
    assert not missing, f"routes without a permission-matrix row: {missing}"


class World:
    """A dataset A (the scoped keys' own), a dataset B, and keys of every kind."""

    def __init__(self, client: TestClient) -> None:
        self.client = client
        self.a = new_dataset(
            client, "alpha", budget={"epsilon": 1000.0, "delta": 1e-5}, adaptive=False
        )
        self.b = new_dataset(
            client, "beta", budget={"epsilon": 1000.0, "delta": 1e-5}, adaptive=False
        )
        for ds in (self.a, self.b):
            r = client.post(
                f"/v1/datasets/{ds['id']}/allocations",
                json={"name": "team", "budget": {"epsilon": 100.0, "delta": 1e-6}},
            )
            assert r.status_code == 201, r.text
        self.made = 0  # allocations made by the matrix's calls (each needs a new name)
        self.keys = {
            VIEWER: self._key("viewer"),
            PIPELINE: self._key("pipeline"),
            ADMIN_ROLE: self._key("admin"),
            "scoped_a": self._key("pipeline", [self.a["id"]]),
            "scoped_viewer_a": self._key("viewer", [self.a["id"]]),
            "scoped_admin_a": self._key("admin", [self.a["id"]]),
        }
        revoked = self.client.post("/v1/keys", json={"role": "admin"}).json()
        assert self.client.delete(f"/v1/keys/{revoked['id']}").status_code == 200
        self.keys["revoked"] = revoked["key"]

    def _key(self, role: str, datasets: list[str] | None = None) -> str:
        r = self.client.post("/v1/keys", json={"role": role, "datasets": datasets})
        assert r.status_code == 201, r.text
        return str(r.json()["key"])

    def reservation(self, dataset: dict[str, Any], holder: str | None = None) -> str:
        """A hold on ``dataset``, made with key ``holder`` where that key may reserve there
        (only the key that made a hold, or an admin, may release it), else with the admin's."""
        body = {"mechanism": {"mechanism": "laplace", "epsilon": 0.01}}
        url = f"/v1/datasets/{dataset['id']}/reservations"
        if holder is not None:
            r = self.client.post(url, json=body, headers={"Authorization": f"Bearer {holder}"})
            if r.status_code == 201:
                return str(r.json()["id"])
        r = self.client.post(url, json=body, headers=ADMIN)
        assert r.status_code == 201, r.text
        return str(r.json()["id"])

    def call(self, e: Endpoint, key: str | None, dataset: dict[str, Any]) -> int:
        params: dict[str, Any] = {}
        body: Any = None
        path = e.path
        if "{dataset_id}" in path:
            path = path.replace("{dataset_id}", dataset["id"])
        if "{reservation_id}" in path:
            holder = key if e.method == "DELETE" else None  # releasing: one's own hold
            path = path.replace("{reservation_id}", self.reservation(dataset, holder))
        if "{name}" in path:
            path = path.replace("{name}", "team")
        if "{key_id}" in path:
            victim = self.client.post(
                "/v1/keys", json={"role": "viewer", "datasets": [dataset["id"]]}, headers=ADMIN
            ).json()
            path = path.replace("{key_id}", victim["id"])
        if e.path.endswith("/compose"):
            body = {"mechanisms": [{"mechanism": "gaussian", "sigma": 5.0}], "delta": 1e-6}
        elif e.method == "POST" and e.path == "/v1/datasets":
            body = {
                "name": f"new-{len(self.client.get('/v1/datasets', headers=ADMIN).json()['datasets'])}",
                "budget": {"epsilon": 1, "delta": 1e-6},
            }
        elif e.path.endswith("/allocations") and e.method == "POST":
            self.made += 1
            body = {"name": f"made-{self.made}", "budget": {"epsilon": 1.0, "delta": 1e-6}}
        elif e.path.endswith("/allocations/{name}"):
            body = {"budget": {"epsilon": 50.0}} if e.method == "PATCH" else None
        elif e.path.endswith("/dp_event"):
            body = {"dp_event": {"type": "LaplaceDpEvent", "noise_multiplier": 100.0}}
        elif e.method == "PATCH":
            body = {"description": "changed"}
        elif e.path.endswith("/charges") or e.path.endswith("/reservations"):
            body = {"mechanism": {"mechanism": "laplace", "epsilon": 0.01}}
        elif e.path == "/v1/keys" and e.method == "POST":
            body = {"role": "viewer"}
        if e.path.endswith("/spend"):
            params = {"delta": 1e-3}
        if e.path.endswith("/calibrate"):
            params = {"mechanism": "gaussian", "sensitivity": 1}
        if e.path.endswith("/blocks"):
            params = {"from": "2026-01-01", "to": "2026-01-02"}
        headers = {"Authorization": f"Bearer {key}"} if key is not None else {"Authorization": ""}
        r = self.client.request(e.method, path, json=body, params=params, headers=headers)
        if r.status_code == 401:
            assert r.headers.get("www-authenticate") == "Bearer"
        return r.status_code


SCOPED_ROLES = {"scoped_a": PIPELINE, "scoped_viewer_a": VIEWER, "scoped_admin_a": ADMIN_ROLE}
# what a scoped admin may never do: create a dataset, or mint an unscoped key (the matrix's body)
SCOPED_ADMIN_FORBIDDEN = {("POST", "/v1/datasets"), ("POST", "/v1/keys")}


def _expected(e: Endpoint, caller: str, same_dataset: bool) -> int:
    if e.role == NONE:
        return e.ok
    if caller in ("no_key", "bad_key", "revoked"):
        return 401
    role = SCOPED_ROLES.get(caller, caller)
    if RANK[role] < RANK[e.role]:
        return 403
    if caller == "scoped_admin_a" and (e.method, e.path) in SCOPED_ADMIN_FORBIDDEN:
        return 403
    if caller.startswith("scoped") and e.scoped and not same_dataset:
        return 404
    return e.ok


CALLERS = [
    "no_key",
    "bad_key",
    "revoked",
    VIEWER,
    PIPELINE,
    ADMIN_ROLE,
    "scoped_a",
    "scoped_viewer_a",
    "scoped_admin_a",
]


@pytest.fixture
def world(client: TestClient) -> World:
    return World(client)


def _check(world: World, e: Endpoint) -> None:
    failures = []
    for caller in CALLERS:
        key = {"no_key": None, "bad_key": "pl_a_not-a-real-key"}.get(caller, world.keys.get(caller))
        for target, same in ((world.a, True), (world.b, False)):
            if not e.scoped and not same:
                continue
            got = world.call(e, key, target)
            want = _expected(e, caller, same)
            if got != want:
                failures.append((caller, "own" if same else "other", got, want))
    assert not failures, failures


@pytest.mark.parametrize("e", ENDPOINTS, ids=[f"{e.method} {e.path}" for e in ENDPOINTS])
def test_matrix(sqlite_client: TestClient, e: Endpoint) -> None:
    """The whole matrix, on SQLite (authorisation does not depend on the database)."""
    _check(World(sqlite_client), e)


SUBSET = [
    e
    for e in ENDPOINTS
    if e.path
    in ("/v1/datasets/{dataset_id}/charges", "/v1/reservations/{reservation_id}/commit", "/v1/keys")
]


@pytest.mark.parametrize("e", SUBSET, ids=[f"{e.method} {e.path}" for e in SUBSET])
def test_matrix_subset_on_both_databases(world: World, e: Endpoint) -> None:
    _check(world, e)


def test_scoped_key_lists_only_its_datasets(world: World) -> None:
    c = world.client
    headers = {"Authorization": f"Bearer {world.keys['scoped_a']}"}
    names = [d["name"] for d in c.get("/v1/datasets", headers=headers).json()["datasets"]]
    assert names == ["alpha"]
    # by name too: the other dataset does not exist for this key
    assert c.get("/v1/datasets/beta", headers=headers).status_code == 404
    assert c.get("/v1/datasets/alpha", headers=headers).status_code == 200


def test_ledger_entries_record_the_charging_key(world: World) -> None:
    c = world.client
    key = world.keys["scoped_a"]
    me = {"Authorization": f"Bearer {key}"}
    r = c.post(
        f"/v1/datasets/{world.a['id']}/charges",
        json={"mechanism": {"mechanism": "laplace", "epsilon": 0.1}},
        headers=me,
    )
    assert r.status_code == 201
    listed = {k["id"]: k for k in c.get("/v1/keys").json()["keys"]}
    key_id = r.json()["entry"]["key_id"]
    assert listed[key_id]["datasets"] == [world.a["id"]] and listed[key_id]["role"] == "pipeline"


BODIES = [
    e
    for e in ENDPOINTS
    if e.method in ("POST", "PATCH")
    and not e.path.endswith(("/commit", "/verify", "/archive", "/unarchive"))  # no body
]


@pytest.mark.parametrize("e", BODIES, ids=[f"{e.method} {e.path}" for e in BODIES])
def test_a_key_is_refused_before_its_request_is_read(
    sqlite_client: TestClient, e: Endpoint
) -> None:
    """An invalid body (or query) from a key that may not call the route is its 401 / 403, not
    a 422 describing the request (an unknown key with a bad body was answered 422)."""
    world = World(sqlite_client)
    path = e.path.replace("{dataset_id}", world.a["id"])
    for caller in ("bad_key", "revoked", VIEWER, PIPELINE, ADMIN_ROLE):
        key = {"bad_key": "pl_a_not-a-real-key"}.get(caller, world.keys.get(caller))
        r = sqlite_client.request(
            e.method, path, json=["not", "a", "body"], headers={"Authorization": f"Bearer {key}"}
        )
        want = (
            401 if caller in ("bad_key", "revoked") else 403 if RANK[caller] < RANK[e.role] else 422
        )
        assert r.status_code == want, (caller, r.text)
        if want == 401:
            assert r.headers.get("www-authenticate") == "Bearer"
            assert "errors" not in r.json()
