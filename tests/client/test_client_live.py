"""The Python client against a live server on 127.0.0.1 (uvicorn subprocess), both databases."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
from privacy_ledger_client import (
    AsyncLedgerClient,
    BudgetExceeded,
    Charge,
    Conflict,
    InvalidRequest,
    LedgerClient,
    NotFound,
    Unauthorized,
    discrete_laplace,
    gaussian,
    laplace,
    mechanism,
    subsampled_gaussian,
)

from tests.conftest import ADMIN_KEY
from tests.live import running


@pytest.fixture(scope="module")
def server_url(module_db_url: str) -> Iterator[str]:
    """One server per backend for the module's tests (each makes datasets of its own names)."""
    with running(module_db_url, ADMIN_KEY) as server:
        yield server.url


class DropResponseOnce(httpx.HTTPTransport):
    """Delivers the request to the server, then loses the answer the first time."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0
        self.keys: list[str | None] = []

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        response.read()
        if request.url.path.endswith("/charges"):
            self.keys.append(request.headers.get("Idempotency-Key"))
            if self.dropped == 0:
                self.dropped += 1
                raise httpx.ReadError("connection dropped after the server processed the request")
        return response


def test_retry_after_dropped_connection_charges_once(server_url: str) -> None:
    transport = DropResponseOnce()
    with LedgerClient(server_url, ADMIN_KEY, transport=transport, backoff=0.01) as c:
        ds = c.create_dataset("retry", 10.0, 1e-6)
        answer = c.charge(ds.id, laplace(0.1), label="once")
        assert isinstance(answer, Charge) and answer.entry.label == "once"
        assert transport.dropped == 1
        assert len(transport.keys) == 2 and transport.keys[0] == transport.keys[1] is not None
        assert c.budget(ds.id).entries == 1
        assert [e.label for e in c.ledger(ds.id).entries] == ["once"]
        # an entry names the allocation it was charged to (and None without one)
        c.create_allocation(ds.id, "team-a", 1.0, 1e-6)
        c.charge(ds.id, laplace(0.1), label="team", allocation="team-a")
        named = {e.label: e.allocation_name for e in c.ledger(ds.id).entries}
        assert named == {"once": None, "team": "team-a"}


def test_reservation_context_manager_commits_and_releases(server_url: str) -> None:
    with LedgerClient(server_url, ADMIN_KEY) as c:
        ds = c.create_dataset("ctx", 1.0, 1e-6, adaptive=False)
        with c.reservation(ds.id, laplace(0.2), label="ok") as hold:
            reserved = c.budget(ds.id).reserved
            assert reserved is not None and reserved.count == 1
            assert reserved.next_expiry == hold.reservation.expires_at
            assert reserved.epsilon == pytest.approx(0.2)
        assert hold.outcome == "committed" and hold.reservation.ledger_entry_id is not None
        assert c.budget(ds.id).entries == 1
        with pytest.raises(RuntimeError, match="pipeline failed"):
            with c.reservation(ds.id, laplace(0.2)) as failed:
                raise RuntimeError("pipeline failed before releasing anything")
        assert failed.outcome == "released"
        budget = c.budget(ds.id)
        assert budget.entries == 1 and budget.reserved is None
        assert budget.spent.epsilon == pytest.approx(0.2)
        assert c.reservation_status(failed.id).status == "released"
        with pytest.raises(Conflict):
            c.commit(failed.id)  # a released hold cannot be committed


def test_errors_carry_problem_fields(server_url: str) -> None:
    with LedgerClient(server_url, ADMIN_KEY) as c:
        ds = c.create_dataset("errs", 1.0, 1e-6)
        with pytest.raises(BudgetExceeded) as info:
            c.charge(ds.id, laplace(5.0))
        e = info.value
        assert e.status == 409 and e.budget is not None and e.spent is not None
        assert (e.budget.epsilon, e.budget.delta) == (1.0, 1e-6)
        assert e.requested is not None and e.requested.mechanism["epsilon"] == 5.0
        assert e.spent.epsilon == 0.0 and e.problem["dataset_id"] == ds.id
        with pytest.raises(InvalidRequest) as bad:
            c.charge(ds.id, gaussian(sigma=-1.0))
        assert bad.value.status == 422 and "sigma" in bad.value.detail
        with pytest.raises(NotFound):
            c.budget("no-such-dataset")
        rejected = c.rejections(dataset=ds.id).rejections
        assert [r.requested.mechanism["epsilon"] for r in rejected if r.requested] == [5.0]
    with LedgerClient(server_url, "pl_a_wrong") as anonymous, pytest.raises(Unauthorized):
        anonymous.datasets()


def test_missing_key_names_the_environment_variable(
    server_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PRIVACY_LEDGER_API_KEY", raising=False)
    with LedgerClient(server_url) as c, pytest.raises(Unauthorized) as info:
        c.datasets()
    assert "PRIVACY_LEDGER_API_KEY" in str(info.value)


def test_calibrate_then_charge_and_dp_sgd(server_url: str) -> None:
    with LedgerClient(server_url, ADMIN_KEY) as c:
        ds = c.create_dataset("cal", 2.0, 1e-6, adaptive=False)
        plan = c.calibrate(ds.id, "gaussian", sensitivity=1.0)
        assert c.charge(ds.id, plan.mechanism).spent.epsilon <= 2.0
        with pytest.raises(BudgetExceeded):
            c.dry_run(ds.id, gaussian(sigma=plan.value))  # the budget is now used up
        ds2 = c.create_dataset("sgd", 3.0, 1e-5, adaptive=False)
        steps = c.calibrate(
            ds2.id, "subsampled_gaussian", parameter="steps", sample_rate=0.01, sigma=1.0
        )
        assert steps.parameter == "steps" and isinstance(steps.value, int) and steps.value >= 1
        c.charge(ds2.id, subsampled_gaussian(1.0, 0.01, steps=steps.value))
        assert c.spend(ds2.id, delta=1e-5).epsilon <= 3.0


def test_keys_audit_compose_and_names_in_paths(server_url: str) -> None:
    with LedgerClient(server_url, ADMIN_KEY) as admin:
        ds = admin.create_dataset("survey 2026 Q1:v2", 4.0, 1e-6)
        assert admin.dataset("survey 2026 Q1:v2").id == ds.id  # quoted as one path segment
        new = admin.create_key("pipeline", datasets=[ds.id], label="etl")
        assert new.key and new.datasets == [ds.id] and new.role == "pipeline"
        with LedgerClient(server_url, new.key) as pipeline:
            pipeline.charge(ds.name, discrete_laplace(0.5, sensitivity=2))
            pipeline.charge(ds.name, mechanism("randomized_response", epsilon=0.3, k=4))
            assert pipeline.budget(ds.name).entries == 2
        admin.update_dataset(ds.id, budget={"epsilon": 5.0})
        assert admin.dataset(ds.id).budget.epsilon == 5.0
        assert admin.revoke_key(new.id).revoked
        actions = {e.action for e in admin.audit(dataset=ds.id)}
        assert {"dataset.created", "budget.raised"} <= actions
        what_if = admin.compose([gaussian(3.0, count=10)], delta=1e-5)
        assert what_if.epsilon == min(what_if.conversions.values())  # type: ignore[union-attr]


def test_async_client_charges_and_reserves(server_url: str) -> None:
    async def scenario() -> None:
        async with AsyncLedgerClient(server_url, ADMIN_KEY) as c:
            ds = await c.create_dataset("async", 3.0, 1e-6, adaptive=False)
            charges = await asyncio.gather(*(c.charge(ds.id, laplace(0.1)) for _ in range(5)))
            after = await c.budget(ds.id)
            assert len({ch.entry.id for ch in charges}) == after.entries == 5
            # the charge committed last saw the whole ledger
            assert max(ch.spent.epsilon for ch in charges) == after.spent.epsilon
            async with c.reservation(ds.id, gaussian(sigma=5.0)) as hold:
                pass
            assert hold.outcome == "committed"
            with pytest.raises(ValueError):
                async with c.reservation(ds.id, laplace(0.1)) as failed:
                    raise ValueError("nothing released")
            assert failed.outcome == "released"
            assert (await c.budget(ds.id)).entries == 6

    asyncio.run(scenario())
