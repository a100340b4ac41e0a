"""The Python client against a live server on 127.0.0.1 (uvicorn subprocess), both databases."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from app.client import (
    BudgetExceeded,
    InvalidRequest,
    LedgerClient,
    NotFound,
    Unauthorized,
    gaussian,
    laplace,
    subsampled_gaussian,
)
from tests.conftest import ADMIN_KEY
from tests.live import running


@pytest.fixture
def server_url(db_url: str) -> Iterator[str]:
    with running(db_url, ADMIN_KEY) as server:
        yield server.url


class DropResponseOnce(httpx.HTTPTransport):
    """Delivers the request to the server, then loses the answer the first time."""

    def __init__(self) -> None:
        super().__init__()
        self.dropped = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        response.read()
        if request.url.path.endswith("/charges") and self.dropped == 0:
            self.dropped += 1
            raise httpx.ReadError("connection dropped after the server processed the request")
        return response


def test_retry_after_dropped_connection_charges_once(server_url: str) -> None:
    transport = DropResponseOnce()
    with LedgerClient(server_url, ADMIN_KEY, transport=transport, backoff=0.01) as c:
        ds = c.create_dataset("retry", 10.0, 1e-6)
        answer = c.charge(ds["id"], laplace(0.1), label="once")
        assert transport.dropped == 1
        assert answer["entry"]["label"] == "once"
        assert c.budget(ds["id"])["entries"] == 1
        assert [e["label"] for e in c.ledger(ds["id"])["entries"]] == ["once"]


def test_reservation_context_manager_commits_and_releases(server_url: str) -> None:
    with LedgerClient(server_url, ADMIN_KEY) as c:
        ds = c.create_dataset("ctx", 1.0, 1e-6, adaptive=False)
        with c.reservation(ds["id"], laplace(0.2), label="ok") as hold:
            assert c.budget(ds["id"])["reserved"]["count"] == 1
        assert hold.outcome == "committed"
        assert c.budget(ds["id"])["entries"] == 1
        with pytest.raises(RuntimeError, match="pipeline failed"):
            with c.reservation(ds["id"], laplace(0.2)) as failed:
                raise RuntimeError("pipeline failed before releasing anything")
        assert failed.outcome == "released"
        budget = c.budget(ds["id"])
        assert budget["entries"] == 1 and budget["reserved"] is None
        assert budget["spent"]["epsilon"] == pytest.approx(0.2)


def test_errors_carry_problem_fields(server_url: str) -> None:
    with LedgerClient(server_url, ADMIN_KEY) as c:
        ds = c.create_dataset("errs", 1.0, 1e-6)
        with pytest.raises(BudgetExceeded) as info:
            c.charge(ds["id"], laplace(5.0))
        e = info.value
        assert e.status == 409 and e.budget == {"epsilon": 1.0, "delta": 1e-6}
        assert e.requested["mechanism"]["epsilon"] == 5.0 and e.spent["epsilon"] == 0.0
        with pytest.raises(InvalidRequest) as bad:
            c.charge(ds["id"], gaussian(sigma=-1.0))
        assert bad.value.status == 422 and "sigma" in bad.value.detail
        with pytest.raises(NotFound):
            c.budget("no-such-dataset")
    with LedgerClient(server_url, "pl_a_wrong") as anonymous, pytest.raises(Unauthorized):
        anonymous.datasets()


def test_calibrate_then_charge_and_dp_sgd(server_url: str) -> None:
    with LedgerClient(server_url, ADMIN_KEY) as c:
        ds = c.create_dataset("cal", 2.0, 1e-6, adaptive=False)
        answer = c.calibrate(ds["id"], "gaussian", sensitivity=1.0)
        assert c.charge(ds["id"], answer["mechanism"])["spent"]["epsilon"] <= 2.0
        with pytest.raises(BudgetExceeded):
            c.dry_run(ds["id"], gaussian(sigma=answer["value"]))  # the budget is now used up
        ds2 = c.create_dataset("sgd", 3.0, 1e-5, adaptive=False)
        steps = c.calibrate(
            ds2["id"], "subsampled_gaussian", parameter="steps", sample_rate=0.01, sigma=1.0
        )
        assert steps["parameter"] == "steps" and steps["value"] >= 1
        c.charge(ds2["id"], subsampled_gaussian(1.0, 0.01, steps=steps["value"]))
        spent = c.spend(ds2["id"], delta=1e-5)
        assert spent["epsilon"] <= 3.0
