"""The dashboard in a real headless Chromium (Debian's ``chromium``, driven by Playwright).

A real server on a fresh SQLite file; datasets, charges and a refusal made over HTTP; then the
page is used as a person would: enter the key, read the gauges, open a dataset with the
keyboard, read the charts and tables. The numbers on the page are compared with the API's.

CI (``.ci/run``) installs Chromium and sets PRIVACY_LEDGER_REQUIRE_BROWSER=1, so there a
missing browser fails the test; on a laptop without Chromium it is skipped with the reason.
"""

from __future__ import annotations

import math
import os
import re
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.live import running

CHROMIUM = os.environ.get("PRIVACY_LEDGER_CHROMIUM", "/usr/bin/chromium")
ADMIN_KEY = "e2e-admin-key-0123456789-abcdefghijklmnop"
FILTER_WORDS = {
    "rdp_fixed_orders": "Adaptive queries allowed (Rényi filter at a fixed order)",
    "rdp_union_bound": "Adaptive queries allowed (older, looser rule)",
    "rdp": "Parameters fixed in advance (Rényi DP, tight)",
    "zcdp": "Parameters fixed in advance (zCDP)",
    "zcdp_filter": "Adaptive queries allowed (zCDP filter)",
    "gdp": "Adaptive Gaussian queries, exact",
    "pld": "Parameters fixed in advance, tightest (privacy loss distribution)",
}
"""The plain words the issue asks for, written out independently of app.js."""


def admin_api(url: str) -> httpx.Client:
    """An HTTP client of the server at ``url`` with the admin key (long timeout: the machine may
    be loaded)."""
    return httpx.Client(base_url=url, headers={"Authorization": f"Bearer {ADMIN_KEY}"}, timeout=120)


def _browser_path() -> str:
    path = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    if path is None:
        reason = f"no Chromium at {CHROMIUM} (Debian: apt-get install chromium)"
        if os.environ.get("PRIVACY_LEDGER_REQUIRE_BROWSER"):
            pytest.fail(reason + " but PRIVACY_LEDGER_REQUIRE_BROWSER is set")
        pytest.skip(reason)
    return path


@contextmanager
def headless_chromium(executable: str) -> Iterator[Any]:
    """A headless Chromium browser (the flags these machines need), closed afterwards."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=executable,
            headless=True,
            args=["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"],
        )
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def dashboard_page(
    executable: str, problems: list[str] | None = None, **page_options: Any
) -> Iterator[Any]:
    """A page of ``headless_chromium``; with ``problems``, the console's errors and warnings
    and the page's errors are appended to it."""
    with headless_chromium(executable) as browser:
        page = browser.new_page(**page_options)
        if problems is not None:
            page.on(
                "console",
                lambda m: (
                    problems.append(f"console {m.type}: {m.text}")
                    if m.type in ("error", "warning")
                    else None
                ),
            )
            page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
        yield page


def sign_in(page: Any, url: str, key: str) -> None:
    """Open the dashboard at ``url`` and sign in with ``key`` (until the overview shows)."""
    page.goto(url + "/")
    page.fill("#key", key)
    page.click("button[type=submit]")
    page.wait_for_selector("body[data-ready=true] #overview:not([hidden])")


DOCS_IMG = Path(__file__).resolve().parents[2] / "docs" / "img"
# the committed screenshots are refreshed only on request (a test run leaves the tree clean):
# PRIVACY_LEDGER_SCREENSHOTS=1 writes them to docs/img
SHOTS = os.environ.get("PRIVACY_LEDGER_SCREENSHOTS") == "1"
PAGE = 25
"""Rows per history page on the dashboard (``PAGE`` in app.js)."""


def floor_pct(spent: float, budget: float, exhausted: bool) -> str:
    """The page's percentage used (``pctUsed`` in charts.js; the name is historical: it is
    rounded UP, never reading less than is used): to 0.1 (0.01 below 0.1 %); never 100.0
    unless exhausted (more digits then: "99.999%"); beyond the budget the true share with
    "(over budget)"."""
    f = max(0.0, spent / budget) if budget > 0 else 0.0
    digits = 2 if 0 < f < 0.001 else 1

    def ceil_to(d: int) -> float:
        return math.ceil(100 * f * 10**d - 1e-7) / 10**d

    v = ceil_to(digits)
    if f > 1 + 1e-9:
        return f"{v:.{digits}f}% (over budget)"
    if exhausted:
        return f"{min(100.0, v):.{digits}f}%"
    while v >= 100 and f < 1 and digits < 8:
        digits += 1
        v = ceil_to(digits)
    if v >= 100:
        v = 100 - 10**-digits
    return f"{v:.{digits}f}%"


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A running server with three datasets: one in use with refusals and a budget change, one
    past its warning threshold, one exhausted."""
    with running(f"sqlite:///{tmp_path / 'e2e.db'}", ADMIN_KEY) as server:
        api = admin_api(server.url)
        census = api.post(
            "/v1/datasets",
            json={"name": "census", "budget": {"epsilon": 3.0, "delta": 1e-6}, "accounting": "rdp"},
        ).json()
        mechs = [
            {"mechanism": "gaussian", "sigma": 40.0},
            {"mechanism": "laplace", "epsilon": 0.02},
            {"mechanism": "randomized_response", "epsilon": 0.05, "k": 2},
            {"mechanism": "subsampled_gaussian", "sigma": 1.1, "sample_rate": 0.01, "steps": 20},
        ]
        for i in range(60):
            if i == 30:  # an audited budget change, marked on the time axis
                r = api.patch(
                    f"/v1/datasets/{census['id']}", json={"budget": {"epsilon": 3.5, "delta": 1e-6}}
                )
                assert r.status_code == 200, r.text
            r = api.post(
                f"/v1/datasets/{census['id']}/charges",
                json={
                    "mechanism": mechs[i % 4],
                    "label": f"query-{i}",
                    "metadata": {"team": "stats" if i % 2 else "health"},
                },
            )
            assert r.status_code == 201, r.text
        hold = api.post(
            f"/v1/datasets/{census['id']}/reservations",
            json={
                "mechanism": {"mechanism": "laplace", "epsilon": 0.01},
                "ttl_seconds": 3600,
                "label": "pending-hold",
            },
        )
        assert hold.status_code == 201, hold.text
        refused = api.post(
            f"/v1/datasets/{census['id']}/charges",
            json={"mechanism": {"mechanism": "laplace", "epsilon": 9.0}, "label": "greedy-query"},
        )
        assert refused.status_code == 409
        survey = api.post(
            "/v1/datasets",
            json={
                "name": "survey",
                "budget": {"epsilon": 1.0, "delta": 1e-6},
                "allowed_mechanisms": ["randomized_response", "laplace"],
            },
        ).json()
        r = api.post(
            f"/v1/datasets/{survey['id']}/charges",
            json={"mechanism": {"mechanism": "randomized_response", "epsilon": 0.9, "k": 2}},
        )
        assert r.status_code == 201, r.text
        clinic = api.post(
            "/v1/datasets", json={"name": "clinic", "budget": {"epsilon": 1.0, "delta": 1e-6}}
        ).json()
        r = api.post(
            f"/v1/datasets/{clinic['id']}/charges",
            json={"mechanism": {"mechanism": "laplace", "epsilon": 1.0}},
        )
        assert r.status_code == 201
        # a finished study, archived where the server can archive (issue 16 item 8)
        old = api.post(
            "/v1/datasets", json={"name": "old-study", "budget": {"epsilon": 1.0, "delta": 1e-6}}
        ).json()
        archived = api.post(f"/v1/datasets/{old['id']}/archive")
        assert archived.status_code in (200, 404, 405), archived.text
        viewer = api.post("/v1/keys", json={"role": "viewer"}).json()["key"]
        yield {
            "old": old,
            "archiving": archived.status_code == 200,
            "server": server,
            "api": api,
            "census": census,
            "survey": survey,
            "clinic": clinic,
            "viewer": viewer,
        }
        api.close()


def expected_state(d: dict[str, Any]) -> str:
    """The API's state when it gives one, else the page's rule (threshold 0.8 by default)."""
    if "state" in d:
        return str(d["state"])
    if d["exhausted"]:
        return "exhausted"
    threshold = d.get("warning_threshold", 0.8)
    return "warning" if d["spent"]["epsilon"] / d["budget"]["epsilon"] >= threshold else "ok"


def check_accessibility(page: Any, where: str) -> list[str]:
    """axe-core (bundled in axe-playwright-python, injected from the wheel: no network) on the
    current page; the serious and critical violations, as readable lines."""
    from axe_playwright_python.sync_playwright import Axe

    results = Axe().run(page)
    assert results.response["testEngine"]["name"] == "axe-core"  # it ran
    for v in results.response["violations"]:
        print(f"axe {where}: {v['id']} ({v['impact']}), {len(v['nodes'])} node(s)")
    bad = [v for v in results.response["violations"] if v.get("impact") in ("serious", "critical")]
    return [
        f"{where}: {v['id']} ({v['impact']}): {[n['target'] for n in v['nodes']][:5]}" for v in bad
    ]


def test_dashboard_shows_the_ledger_as_the_api_reports_it(world: dict[str, Any]) -> None:
    executable = _browser_path()

    api: httpx.Client = world["api"]
    census, survey, clinic = world["census"], world["survey"], world["clinic"]
    datasets = {d["id"]: d for d in api.get("/v1/datasets").json()["datasets"]}
    states = {i: expected_state(d) for i, d in datasets.items()}
    named = {census["id"]: "ok", survey["id"]: "warning", clinic["id"]: "exhausted"}
    assert {i: states[i] for i in named} == named
    # the default listing hides the archived study where the server archives
    assert (world["old"]["id"] in datasets) == (not world["archiving"])
    every = api.get("/v1/datasets", params={"archived": "all"}).json()["datasets"]
    assert world["old"]["id"] in {d["id"] for d in every}
    calib = api.get(
        f"/v1/datasets/{census['id']}/calibrate",
        params={"mechanism": "gaussian", "sensitivity": 1},
    ).json()
    ledger_total = api.get(f"/v1/datasets/{census['id']}/ledger", params={"limit": 1}).json()[
        "total"
    ]
    assert ledger_total == 60

    problems: list[str] = []
    a11y: list[str] = []
    with dashboard_page(executable, problems, viewport={"width": 1280, "height": 1000}) as page:
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

        # overview: one card per dataset, the exact spend, the state in words and shape
        cards = page.locator("#dataset-list li.card")
        assert cards.count() == len(datasets)
        for ds_id, d in datasets.items():
            card = page.locator(f"li[data-dataset='{ds_id}']")
            value = card.locator("[data-testid=spent]").get_attribute("data-value")
            assert value is not None and float(value) == d["spent"]["epsilon"]
            st = states[ds_id]
            pct = floor_pct(d["spent"]["epsilon"], d["budget"]["epsilon"], st == "exhausted")
            label = card.locator("svg.gauge").get_attribute("aria-label") or ""
            assert pct in label and d["name"] in label
            assert card.get_attribute("data-state") == st
            assert card.locator("svg.gauge").get_attribute("data-state") == st
            badge = card.locator("[data-testid=state]")
            assert badge.get_attribute("data-state") == st
            assert badge.locator("svg .state-icon").count() == 1  # the shape
            text = card.inner_text()
            if st != "exhausted":
                assert "100.0%" not in text
            # the accounting in plain words, never the bare technical name
            assert FILTER_WORDS[d["filter"]] in text
        assert (
            f"Warning: {floor_pct(datasets[survey['id']]['spent']['epsilon'], 1.0, False)} used"
            in (page.locator(f"li[data-dataset='{survey['id']}']").inner_text())
        )
        assert "Exhausted" in page.locator(f"li[data-dataset='{clinic['id']}']").inner_text()
        # the percentage rule on values near the edges, against floor_pct written here
        for used_, total, exhausted in [
            (0.99999, 1.0, False),
            (1.0, 1.0, False),
            (0.8, 1.0, False),
            (0.00042, 1.0, False),
            (1.0, 1.0, True),
            (0.123456, 0.5, False),
            (0.8, 0.5, True),
            (0.12301, 1.0, False),
        ]:
            got = page.evaluate(
                "([u, t, e]) => window.Charts.pctUsed(u, t, e)", [used_, total, exhausted]
            )
            assert got == floor_pct(used_, total, exhausted), (used_, total, exhausted)
        assert floor_pct(0.99999, 1.0, False) == "99.999%"  # never 100.0 unless exhausted
        assert floor_pct(0.8, 0.5, True) == "160.0% (over budget)"
        a11y += check_accessibility(page, "overview")
        DOCS_IMG.mkdir(parents=True, exist_ok=True)
        if SHOTS:
            page.screenshot(path=str(DOCS_IMG / "overview.png"), full_page=True)

        # the show-archived toggle asks the API for every dataset
        with page.expect_request(lambda r: "archived=all" in r.url):
            page.check("#show-archived")
        page.wait_for_selector(f"li[data-dataset='{world['old']['id']}']")
        assert page.locator("#dataset-list li.card").count() == len(every)
        old_card = page.locator(f"li[data-dataset='{world['old']['id']}']")
        assert (old_card.locator("[data-testid=archived]").count() == 1) == world["archiving"]
        page.uncheck("#show-archived")
        page.wait_for_function(
            f"() => document.querySelectorAll('#dataset-list li.card').length === {len(datasets)}"
        )

        # the warning dataset: calibration for its own kinds only (RR and Laplace)
        page.goto(world["server"].url + f"/#/datasets/{survey['id']}")
        page.wait_for_selector("body[data-ready=true] #detail:not([hidden])")
        page.wait_for_selector("[data-testid=calibration-table]")
        kinds = page.locator("[data-testid=calibration-table] tbody tr")
        assert sorted(
            kinds.nth(i).get_attribute("data-kind") or "" for i in range(kinds.count())
        ) == ["laplace", "randomized_response"]
        rr = api.get(
            f"/v1/datasets/{survey['id']}/calibrate",
            params={"mechanism": "randomized_response", "k": 2},
        ).json()
        got = page.get_attribute("[data-testid=calibrate-randomized_response]", "data-value")
        assert got is not None and float(got) == rr["value"]
        assert "Warning" in page.inner_text("[data-testid=detail-status]")

        # the exhausted one says so, and offers no next query
        page.goto(world["server"].url + f"/#/datasets/{clinic['id']}")
        page.wait_for_selector("body[data-ready=true] #detail:not([hidden])")
        page.wait_for_selector("[data-testid=calibration-exhausted]")
        assert "Exhausted" in page.inner_text("[data-testid=detail-status]")

        # open census from the overview with the keyboard
        page.goto(world["server"].url + "/#/")
        page.wait_for_selector("body[data-ready=true] #overview:not([hidden])")
        page.locator(f"li[data-dataset='{census['id']}'] a").focus()
        page.keyboard.press("Enter")
        page.wait_for_selector("body[data-ready=true] #detail:not([hidden])")
        page.wait_for_selector("[data-testid=calibrate-gaussian]")
        d = datasets[census["id"]]
        spent = page.get_attribute("[data-testid=detail-spent]", "data-value")
        assert spent is not None and float(spent) == d["spent"]["epsilon"]
        assert page.inner_text("[data-testid=detail-entries]") == "60"
        sigma = page.get_attribute("[data-testid=calibrate-gaussian]", "data-value")
        assert sigma is not None and float(sigma) == calib["value"]
        assert FILTER_WORDS[d["filter"]] in page.inner_text("[data-testid=accounting]")
        assert d["filter"] in page.inner_text("[data-testid=accounting]")
        href = page.locator("[data-testid=accounting] a").get_attribute("href") or ""
        glossary = httpx.get(world["server"].url + href.split("#")[0])
        assert glossary.status_code == 200 and f'id="{d["filter"]}"' in glossary.text
        assert href.endswith(f"#{d['filter']}")

        # the pending hold: listed with its expiry, and counted in remaining, where the server
        # reports holds (issue 16 item 4); without that the page says it cannot list them
        remaining = page.get_attribute("[data-testid=detail-remaining]", "data-value")
        assert remaining is not None and float(remaining) == d["remaining"]["epsilon"]
        holds = page.inner_text("#holds")
        if "reserved" in d:
            assert d["reserved"]["count"] == 1
            assert "pending-hold" in holds and "laplace" in holds
            assert "1 active hold" in page.inner_text("[data-testid=detail-remaining]")
        else:
            assert "does not list holds" in holds

        # spend over time: a time axis by default, one point per entry, the budget change
        # marked; the entry-number view is a toggle
        fig = page.locator("#fig-series")
        assert fig.get_attribute("data-view") == "time"
        series = page.locator("[data-testid=chart-series] g[data-series]")
        assert series.get_attribute("data-n") == "60"
        assert page.locator("[data-testid=chart-series] [data-testid=budget-change]").count() == 1
        assert "time charged" in (page.text_content("[data-testid=chart-series]") or "")
        page.check("#view-entry")
        assert fig.get_attribute("data-view") == "entry"
        assert "ledger entry" in (page.text_content("[data-testid=chart-series]") or "")
        assert (
            page.locator("[data-testid=chart-series] g[data-series]").get_attribute("data-n")
            == "60"
        )
        page.check("#view-time")
        assert fig.get_attribute("data-view") == "time"

        rdp = page.locator("[data-testid=chart-rdp] g[data-series]")
        assert rdp.count() == 2
        assert int(rdp.nth(0).get_attribute("data-n") or 0) > 10
        bars = page.locator("[data-testid=chart-breakdown] g.bar")
        assert bars.count() == 4
        for chart in ("series", "rdp", "tradeoff", "breakdown"):
            svg = page.locator(f"[data-testid=chart-{chart}]")
            assert svg.get_attribute("role") == "img"
            assert svg.get_attribute("aria-labelledby")
            assert svg.locator(":scope > title").count() == 1
        assert "sets the spend" not in page.inner_text("#detail")

        if SHOTS:
            page.screenshot(path=str(DOCS_IMG / "dataset.png"), full_page=True)
        assert (DOCS_IMG / "dataset.png").stat().st_size > 20_000

        # history: newest first with who charged and metadata; paging reaches the oldest
        first = page.locator("#entries tbody tr").nth(0).inner_text()
        newest = api.get(f"/v1/datasets/{census['id']}/ledger", params={"limit": 1}).json()
        assert newest["entries"][0]["key_id"]
        assert "query-59" in first and "team: stats" in first
        # who charged it: the key's name where the API gives one, else its id
        who = newest["entries"][0].get("key_name") or newest["entries"][0]["key_id"]
        assert who in first
        seen: list[str] = []
        for _ in range(10):
            seen += page.locator("#entries tbody tr td:first-child").all_inner_texts()
            if page.locator("#entries-older").is_disabled():
                break
            page.click("#entries-older")
            page.wait_for_function(
                "(n) => document.querySelector('#entries tbody tr td').textContent !== n",
                arg=seen[-PAGE if len(seen) >= PAGE else 0],
            )
        assert seen == [str(n) for n in range(60, 0, -1)]
        assert "oldest reached" in page.inner_text("#entries-page")
        page.click("#entries-newer")
        page.wait_for_function("() => !document.querySelector('#entries-older').disabled")
        rejections = page.inner_text("#rejections")
        assert "greedy-query" in rejections

        # filters: by kind, then back to all
        page.select_option("#f-kind", "laplace")
        page.click("#filters button[type=submit]")
        page.wait_for_function(
            "() => [...document.querySelectorAll('#entries tbody tr td:nth-child(3)')]"
            ".every((td) => td.textContent.startsWith('laplace('))"
        )
        assert page.locator("#entries tbody tr").count() >= 1
        page.select_option("#f-kind", "")
        page.click("#filters button[type=submit]")
        page.wait_for_function(
            "() => document.querySelector('#entries tbody tr td').textContent === '60'"
        )

        # CSV export: offered where the server's OpenAPI lists ?format=, and then it is the
        # API's own CSV; hidden otherwise
        spec = httpx.get(world["server"].url + "/openapi.json").json()
        ledger_params = spec["paths"]["/v1/datasets/{dataset_id}/ledger"]["get"]["parameters"]
        if any(p["name"] == "format" for p in ledger_params):
            assert page.locator("#csv").is_visible()
            with page.expect_download() as dl:
                page.click("#csv")
            got = Path(dl.value.path()).read_text()
            want = api.get(f"/v1/datasets/{census['id']}/ledger", params={"format": "csv"})
            assert got == want.text
        else:
            assert page.locator("#csv").is_hidden()

        a11y += check_accessibility(page, "dataset")
    assert problems == [], problems
    assert a11y == [], a11y


def test_csv_download_sends_the_key_and_saves_the_answer(world: dict[str, Any]) -> None:
    """The CSV link's own path, whether or not this server exports yet: the OpenAPI document
    is given a ``format`` parameter and the export answered by the test (recording the
    request), so what is checked is the page: the key goes in the header, the filters go
    along, the file saved is the body."""
    executable = _browser_path()
    from playwright.sync_api import Route

    census = world["census"]
    body = "seq,created_at,kind\n1,2026-01-01T00:00:00Z,gaussian\n"
    seen: list[dict[str, str]] = []

    def openapi(route: Route) -> None:
        spec = route.fetch().json()
        params = spec["paths"]["/v1/datasets/{dataset_id}/ledger"]["get"].setdefault(
            "parameters", []
        )
        if not any(p["name"] == "format" for p in params):
            params.append({"name": "format", "in": "query", "schema": {"type": "string"}})
        route.fulfill(json=spec)

    def export(route: Route) -> None:
        seen.append({"url": route.request.url, **route.request.headers})
        route.fulfill(status=200, body=body, headers={"Content-Type": "text/csv"})

    with dashboard_page(executable) as page:
        page.route("**/openapi.json", openapi)
        page.route("**/ledger?*format=csv*", export)
        sign_in(page, world["server"].url, world["viewer"])
        page.goto(world["server"].url + f"/#/datasets/{census['id']}")
        page.wait_for_selector("body[data-ready=true] #detail:not([hidden])")
        page.select_option("#f-kind", "gaussian")
        page.click("#filters button[type=submit]")
        page.wait_for_selector("#csv:not([hidden])")
        with page.expect_download() as dl:
            page.click("#csv")
        assert Path(dl.value.path()).read_text() == body
        assert dl.value.suggested_filename == f"ledger-{census['id']}.csv"
    assert len(seen) == 1
    assert seen[0]["authorization"] == f"Bearer {world['viewer']}"
    assert "format=csv" in seen[0]["url"] and "kind=gaussian" in seen[0]["url"]


def test_overview_reads_every_page_of_the_listing(tmp_path: Path) -> None:
    """GET /v1/datasets answers one page (at most 1000 by name) with ``total`` beside it; the
    overview read one page, so with 1003 datasets the 1003rd had no card. Here the listing's
    pages are made 2 long (the page's requests go to the real server with ``limit`` at most
    2), so six datasets, one archived, take pages the page must read by ``offset``."""
    executable = _browser_path()
    from playwright.sync_api import Route

    asked: list[dict[str, str]] = []

    def small_pages(route: Route) -> None:
        url = httpx.URL(route.request.url)
        asked.append(dict(url.params))
        limit = min(int(url.params.get("limit", 1000)), 2)
        route.continue_(url=str(url.copy_set_param("limit", limit)))

    with running(f"sqlite:///{tmp_path / 'e2e.db'}", ADMIN_KEY) as server:
        with admin_api(server.url) as api:
            ids = {}
            for k in range(6):
                r = api.post(
                    "/v1/datasets",
                    json={"name": f"d{k}", "budget": {"epsilon": 1.0, "delta": 1e-6}},
                )
                assert r.status_code == 201, r.text
                ids[f"d{k}"] = r.json()["id"]
            assert api.post(f"/v1/datasets/{ids['d3']}/archive").status_code == 200
            assert api.get("/v1/datasets", params={"limit": 2}).json()["total"] == 5
        problems: list[str] = []
        with dashboard_page(executable, problems) as page:
            page.route(re.compile(r"/v1/datasets(\?.*)?$"), small_pages)
            sign_in(page, server.url, ADMIN_KEY)
            active = [n for n in ids if n != "d3"]
            page.wait_for_function(
                "() => document.querySelectorAll('#dataset-list li.card').length === 5"
            )
            shown = page.locator("#dataset-list li.card").evaluate_all(
                "cards => cards.map((c) => c.dataset.dataset)"
            )
            assert shown == [ids[n] for n in active]
            assert page.locator("#status").inner_text() == "5 datasets"
            assert [a.get("offset") for a in asked] == ["0", "2", "4"]
            asked.clear()
            page.check("#show-archived")
            page.wait_for_function(
                "() => document.querySelectorAll('#dataset-list li.card').length === 6"
            )
            shown = page.locator("#dataset-list li.card").evaluate_all(
                "cards => cards.map((c) => c.dataset.dataset)"
            )
            assert shown == list(ids.values())
            assert [(a.get("offset"), a.get("archived")) for a in asked] == [
                ("0", "all"),
                ("2", "all"),
                ("4", "all"),
            ]
        assert problems == [], problems
