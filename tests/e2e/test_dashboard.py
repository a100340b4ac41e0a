"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

A real server on a fresh SQLite file; datasets, charges and a refusal made over HTTP; then the
page is used as a person would: enter the key, read the gauges, open a dataset with the
keyboard, read the charts and tables. The numbers on the page are compared with the API's.

CI (``.ci/run``) installs Chromium and sets PRIVACY_LEDGER_REQUIRE_BROWSER=1, so there a
missing browser fails the test; on a laptop without Chromium it is skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.live import running

CHROMIUM = os.environ.get("PRIVACY_LEDGER_CHROMIUM", "/usr/bin/chromium")
ADMIN_KEY = "e2e-admin-key-0123456789-abcdefghijklmnop"


def _browser_path() -> str:
    path = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if path is None:
        reason = f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)"
        if os.environ.get("PRIVACY_LEDGER_REQUIRE_BROWSER"):
            pytest.fail(reason + " but PRIVACY_LEDGER_REQUIRE_BROWSER is set")
        pytest.skip(reason)
    return path


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A running server with two datasets: one in use with a refusal, one exhausted."""
    with running(f"sqlite:///{tmp_path / 'e2e.db'}", ADMIN_KEY) as server:
        api = httpx.Client(
            base_url=server.url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=120
        )
        census = api.post(
            "/v1/datasets",
            json={"name": "census", "budget": {"epsilon": 3.0, "delta": 1e-6}, "accounting": "rdp"},
        ).json()
        mechs = [
            {"mechanism": "gaussian", "sigma": 25.0},
            {"mechanism": "laplace", "epsilon": 0.05},
            {"mechanism": "randomized_response", "epsilon": 0.1, "k": 2},
            {"mechanism": "subsampled_gaussian", "sigma": 1.1, "sample_rate": 0.01, "steps": 50},
        ]
        for i in range(24):
            r = api.post(
                f"/v1/datasets/{census['id']}/charges",
                json={"mechanism": mechs[i % 4], "label": f"query-{i}"},
            )
            assert r.status_code == 201, r.text
        refused = api.post(
            f"/v1/datasets/{census['id']}/charges",
            json={"mechanism": {"mechanism": "laplace", "epsilon": 9.0}, "label": "greedy-query"},
        )
        assert refused.status_code == 409
        clinic = api.post(
            "/v1/datasets", json={"name": "clinic", "budget": {"epsilon": 1.0, "delta": 1e-6}}
        ).json()
        r = api.post(
            f"/v1/datasets/{clinic['id']}/charges",
            json={"mechanism": {"mechanism": "laplace", "epsilon": 1.0}},
        )
        assert r.status_code == 201
        viewer = api.post("/v1/keys", json={"role": "viewer"}).json()["key"]
        yield {"server": server, "api": api, "census": census, "clinic": clinic, "viewer": viewer}
        api.close()


def test_dashboard_shows_the_ledger_as_the_api_reports_it(
    world: dict[str, Any], tmp_path: Path
) -> None:
    executable = _browser_path()
    from playwright.sync_api import sync_playwright

    api: httpx.Client = world["api"]
    census, clinic = world["census"], world["clinic"]
    datasets = {d["id"]: d for d in api.get("/v1/datasets").json()["datasets"]}
    assert datasets[clinic["id"]]["exhausted"] and not datasets[census["id"]]["exhausted"]
    calib = api.get(
        f"/v1/datasets/{census['id']}/calibrate",
        params={"mechanism": "gaussian", "sensitivity": 1},
    ).json()

    problems: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=executable,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 1000})
            page.on(
                "console",
                lambda m: (
                    problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning")
                    else None
                ),
            )
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
            page.goto(world["server"].url + "/")

            # a wrong key is refused with a message, and is not kept
            page.fill("#key", "pl_v_not-a-real-key")
            page.press("#key", "Enter")
            page.wait_for_selector("#login-error:has-text('not accepted')")
            assert page.evaluate("sessionStorage.length") == 0
            problems.clear()  # the 401 of the wrong key is the expected console message

            page.fill("#key", world["viewer"])
            page.click("button[type=submit]")
            page.wait_for_selector("body[data-ready=true] #overview:not([hidden])")
            assert page.evaluate("sessionStorage.getItem('privacy-ledger.key')") == world["viewer"]
            assert page.evaluate("localStorage.length") == 0

            # overview: one card per dataset, the exact spend, the exhausted one flagged
            cards = page.locator("#dataset-list li.card")
            assert cards.count() == 2
            for ds_id, d in datasets.items():
                card = page.locator(f"li[data-dataset='{ds_id}']")
                value = card.locator("[data-testid=spent]").get_attribute("data-value")
                assert value is not None and float(value) == d["spent"]["epsilon"]
                label = card.locator("svg.gauge").get_attribute("aria-label") or ""
                pct = 100 * d["spent"]["epsilon"] / d["budget"]["epsilon"]
                assert f"{pct:.1f}%" in label and d["name"] in label
                assert (card.locator("[data-testid=exhausted]").count() == 1) == d["exhausted"]
            assert "EXHAUSTED" in page.locator(f"li[data-dataset='{clinic['id']}']").inner_text()

            # open the dataset with the keyboard
            page.locator(f"li[data-dataset='{census['id']}'] a").focus()
            page.keyboard.press("Enter")
            page.wait_for_selector("body[data-ready=true] #detail:not([hidden])")
            page.wait_for_selector("[data-testid=sigma]")
            d = datasets[census["id"]]
            spent = page.get_attribute("[data-testid=detail-spent]", "data-value")
            assert spent is not None and float(spent) == d["spent"]["epsilon"]
            assert page.inner_text("[data-testid=detail-entries]") == "24"
            sigma = page.get_attribute("[data-testid=sigma]", "data-value")
            assert sigma is not None and float(sigma) == calib["value"]
            assert "needs σ ≥" in page.inner_text("#calibration")

            # charts: the series has a point per entry, RDP chart the ledger and the budget
            series = page.locator("[data-testid=chart-series] g[data-series]")
            assert series.get_attribute("data-n") == "24"
            rdp = page.locator("[data-testid=chart-rdp] g[data-series]")
            assert rdp.count() == 2
            assert int(rdp.nth(0).get_attribute("data-n") or 0) > 10
            # the budget: a point per order the filter admits on (one for rdp_fixed_orders,
            # fixed at creation; the whole grid for the other RDP filters)
            budget_points = int(rdp.nth(1).get_attribute("data-n") or 0)
            if d["filter"] == "rdp_fixed_orders":
                assert budget_points == len(d["filter_params"]["orders"])
            else:
                assert budget_points > 10
            assert page.locator("[data-testid=chart-tradeoff] g[data-series]").get_attribute(
                "data-n"
            )
            bars = page.locator("[data-testid=chart-breakdown] g.bar")
            assert bars.count() == 4
            for chart in ("series", "rdp", "tradeoff", "breakdown"):
                svg = page.locator(f"[data-testid=chart-{chart}]")
                assert svg.get_attribute("role") == "img"
                assert svg.get_attribute("aria-labelledby")
                assert svg.locator("title").count() == 1

            # latest entries and the rejection
            assert page.locator("#entries tbody tr").count() == 10
            assert "query-23" in page.inner_text("#entries tbody tr >> nth=0")
            rejections = page.inner_text("#rejections")
            assert "greedy-query" in rejections and "refused" in rejections

            shot = tmp_path / "dashboard.png"
            page.screenshot(path=str(shot), full_page=True)
            assert shot.stat().st_size > 20_000
        finally:
            browser.close()
    assert problems == [], problems
