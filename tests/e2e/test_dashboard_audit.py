"""The dashboard faults of the UI audit (rounding, over-budget share, the spend series after a
budget delta change, budget changes after the last entry, long names, scrollable tables,
filters, an unreadable dataset, repeated words, bidi overrides), each checked in a real
headless Chromium against a server of its own."""

from __future__ import annotations

import datetime as dt
import functools
import json
import re
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.conftest import run_sql
from tests.e2e.test_dashboard import (
    ADMIN_KEY,
    _browser_path,
    admin_api,
    check_accessibility,
    dashboard_page,
    sign_in,
)
from tests.live import running

RLO = "\u202e"


def fmt_dir(x: float, up: bool, strict: bool = False) -> str:
    """The page's directed format (``fmtUp`` / ``fmtDown`` in charts.js, ``fmtStrict`` with
    ``strict``) for plain values (1e-3 <= |x| < 1e6): 4 significant digits; a value they state
    exactly, or (unless strict) within 1e-9 relative, is printed as is, any other is rounded
    towards the safe side of its exact decimal."""
    short = float(f"{x:.4g}")
    close = not strict and abs(short - x) <= 1e-9 * abs(x)
    if short == x or close or (short > x if up else short < x):
        return f"{short:g}"
    exact = Decimal(x)
    step = Decimal(1).scaleb(exact.adjusted() - 3)
    moved = float(Decimal(f"{x:.4g}") + (step if up else -step))
    return f"{moved:g}"


def open_dataset(page: Any, ds_id: str) -> None:
    """Go to a dataset's page and wait until the page has drawn it (or its error)."""
    page.evaluate("document.body.removeAttribute('data-ready')")
    page.evaluate(f"location.hash = '#/datasets/{ds_id}'")
    page.wait_for_selector("body[data-ready=true] #detail:not([hidden])")


def create_dataset(
    api: httpx.Client, name: str, eps: float, delta: float = 1e-6, **kw: Any
) -> dict[str, Any]:
    """A dataset with budget (``eps``, ``delta``) and the other fields ``kw``, created."""
    r = api.post(
        "/v1/datasets", json={"name": name, "budget": {"epsilon": eps, "delta": delta}, **kw}
    )
    assert r.status_code == 201, r.text
    return dict(r.json())


def charge_dataset(
    api: httpx.Client, ds: dict[str, Any], mech: dict[str, Any], status: int = 201, **kw: Any
) -> None:
    """A charge of ``mech`` (with the body's other fields ``kw``) answered ``status``."""
    r = api.post(f"/v1/datasets/{ds['id']}/charges", json={"mechanism": mech, **kw})
    assert r.status_code == status, r.text


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    db = tmp_path_factory.mktemp("audit") / "e2e.db"
    with running(f"sqlite:///{db}", ADMIN_KEY) as server:
        api = admin_api(server.url)

        dataset = functools.partial(create_dataset, api)
        charge = functools.partial(charge_dataset, api)

        def patch(ds: dict[str, Any], budget: dict[str, float]) -> None:
            r = api.patch(f"/v1/datasets/{ds['id']}", json={"budget": budget})
            assert r.status_code == 200, r.text

        w: dict[str, Any] = {"server": server, "api": api}
        w["rounding"] = dataset("rounding", 1.0, adaptive=False)
        charge(w["rounding"], {"mechanism": "laplace", "epsilon": 0.12344})
        w["calib"] = dataset("calib", 1.0, accounting="zcdp", adaptive=False)
        charge(w["calib"], {"mechanism": "gaussian", "sigma": 6.0})
        w["delta"] = dataset("delta-change", 1.0, 1e-5, adaptive=False)
        for sigma in (6.0, 7.0, 8.0):
            charge(w["delta"], {"mechanism": "gaussian", "sigma": sigma})
        patch(w["delta"], {"delta": 1e-9})
        # an older release's formula below the exact value: entry 2 charged (curve, spend after
        # it, totals) as a Gaussian of sigma 6*sqrt(2), its mechanism a Gaussian of sigma 6; a
        # rebuild re-derives its curve and raises the spend, not the spend the entry stored
        w["rederived"] = dataset("rederived", 1.0, 1e-5, accounting="zcdp", adaptive=False)
        charge(w["rederived"], {"mechanism": "gaussian", "sigma": 6.0})
        charge(w["rederived"], {"mechanism": "gaussian", "sigma": 6.0 * 2**0.5})
        run_sql(
            f"sqlite:///{db}",
            "UPDATE ledger_entry SET mechanism = :m WHERE dataset_id = :d AND seq = 2",
            m=json.dumps({"mechanism": "gaussian", "sigma": 6.0, "sensitivity": 1.0, "count": 1}),
            d=w["rederived"]["id"],
        )
        r = api.post("/v1/admin/verify", params={"rebuild": "true"})
        assert r.status_code == 200, r.text
        w["over"] = dataset("overspent", 1.0, adaptive=False)
        charge(w["over"], {"mechanism": "laplace", "epsilon": 0.8})
        patch(w["over"], {"epsilon": 0.5})
        w["raised"] = dataset("raised-later", 1.0, adaptive=False)
        for e in (0.2, 0.3):
            charge(w["raised"], {"mechanism": "laplace", "epsilon": e})
        patch(w["raised"], {"epsilon": 2.0})
        w["long"] = dataset("W" * 200, 1.0, adaptive=False, description="x" * 300)
        r = api.post(
            f"/v1/datasets/{w['long']['id']}/allocations",
            json={"name": "T" * 200, "budget": {"epsilon": 0.5, "delta": 1e-6}},
        )
        assert r.status_code == 201, r.text
        charge(
            w["long"],
            {"mechanism": "laplace", "epsilon": 0.05},
            allocation="T" * 200,
            label="L" * 200,
        )
        charge(
            w["long"],
            {"mechanism": "laplace", "epsilon": 0.01},
            label=f"{RLO}spoofed label",
            metadata={"note": f"{RLO}reversed", "team": "stats"},
        )
        w["plain"] = dataset("plain", 1.0)
        charge(w["plain"], {"mechanism": "laplace", "epsilon": 0.05}, label="nightly")
        w["filters"] = dataset("filters", 1.0, adaptive=False)
        for i in range(5):
            charge(
                w["filters"], {"mechanism": "laplace", "epsilon": 0.01}, label=f"nightly-report-{i}"
            )
        for i in range(2):
            charge(w["filters"], {"mechanism": "gaussian", "sigma": 50.0}, label=f"g{i}")
        charge(w["filters"], {"mechanism": "gaussian", "sigma": 0.05}, 409, label="gauss refused")
        for i in range(30):
            charge(w["filters"], {"mechanism": "laplace", "epsilon": 5}, 409, label=f"lap {i}")
        today = dt.datetime.now(dt.UTC).date().isoformat()
        w["daily"] = dataset("daily", 1.0, adaptive=False, partition={"unit": "day"})
        charge(
            w["daily"],
            {"mechanism": "laplace", "epsilon": 0.6},
            blocks={"from": today, "to": today},
        )
        w["secret"] = dataset("secret", 1.0)
        r = api.post(
            "/v1/keys", json={"role": "viewer", "datasets": [w["rounding"]["id"]], "label": "s"}
        )
        assert r.status_code == 201, r.text
        w["scoped"] = r.json()["key"]
        yield w
        api.close()


def test_numbers_are_rounded_to_the_safe_side(world: dict[str, Any]) -> None:
    """Spend up, remaining down, "σ ≥" up, "ε ≤" down; an exact value as is. The calibration
    answers the page shows are admitted when charged (6.911 and 0.1483 were refused)."""
    executable = _browser_path()
    api: httpx.Client = world["api"]
    rounding, calib = world["rounding"], world["calib"]
    d = api.get(f"/v1/datasets/{rounding['id']}").json()
    assert d["spent"]["epsilon"] == 0.12344
    with dashboard_page(executable, viewport={"width": 1280, "height": 1000}) as page:
        sign_in(page, world["server"].url, ADMIN_KEY)
        cases = [0.5, 0.12344, 0.87656, 6.911498210485264, 0.14826122988659465, 0.1, 3.5]
        cases += [0.9786201, 0.9104241, 2.458477, 1.041523, 0.30000000000000004, 1.0, 0.99999]
        for x in cases:
            got = page.evaluate("(x) => [Charts.fmtUp(x), Charts.fmtDown(x)]", x)
            assert got == [fmt_dir(x, True), fmt_dir(x, False)], x
            assert float(got[0]) >= x * (1 - 1e-9) and float(got[1]) <= x * (1 + 1e-9), (x, got)
            strict = page.evaluate("(x) => [Charts.fmtStrict(x, 1), Charts.fmtStrict(x, -1)]", x)
            assert strict == [fmt_dir(x, True, True), fmt_dir(x, False, True)], x
            assert float(strict[0]) >= x and float(strict[1]) <= x, (x, strict)
        # float noise of an exact sum reads as the sum; typed-back values stay strict
        assert page.evaluate("Charts.fmtUp(0.30000000000000004)") == "0.3"
        assert page.evaluate("Charts.fmtStrict(0.30000000000000004, 1)") == "0.3001"
        assert page.evaluate("[Charts.fmtUp(0.5), Charts.fmtDown(0.5)]") == ["0.5", "0.5"]
        # the percentage used rounds up too
        assert page.evaluate("Charts.pctUsed(0.12344, 1, false)") == "12.4%"
        assert page.evaluate("Charts.pctUsed(0.12301, 1, false)") == "12.4%"
        assert page.evaluate("Charts.pctUsed(0.99999, 1, false)") == "99.999%"

        card = page.locator(f"li[data-dataset='{rounding['id']}']").inner_text()
        assert "ε = 0.1235" in card and "0.1234" not in card
        open_dataset(page, rounding["id"])
        assert page.inner_text("[data-testid=detail-spent]").startswith("ε = 0.1235 ")
        assert page.inner_text("[data-testid=detail-remaining]").startswith("ε = 0.8765")
        assert page.inner_text("#entries tbody tr td:nth-child(7)") == "0.1235"

        open_dataset(page, calib["id"])
        page.wait_for_selector("[data-testid=calibrate-laplace]")
        for kind, prefix in [("gaussian", "noise σ ≥ "), ("laplace", "ε ≤ ")]:
            shown = page.inner_text(f"[data-testid=calibrate-{kind}]")
            assert shown.startswith(prefix), shown
            value = float(shown.split()[-1])
            exact = float(page.get_attribute(f"[data-testid=calibrate-{kind}]", "data-value") or 0)
            mech: dict[str, Any] = (
                {"mechanism": "gaussian", "sigma": value, "sensitivity": 1}
                if kind == "gaussian"
                else {"mechanism": "laplace", "epsilon": value}
            )
            r = api.post(
                f"/v1/datasets/{calib['id']}/charges",
                params={"dry_run": "true"},
                json={"mechanism": mech},
            )
            assert r.status_code == 200, (kind, shown, exact, r.text)


def test_the_next_query_table_is_the_registry_rounded_to_the_safe_side(
    world: dict[str, Any],
) -> None:
    """Every kind GET /v1/mechanisms offers for calibration (not a hard-coded six) is a row,
    named by its title with its description as the tooltip and its declared parameters in
    words; each value is rounded by the answer's direction: a least value (noise) up, a
    largest one (epsilon, rho, steps) down, never to nearest."""
    executable = _browser_path()
    api: httpx.Client = world["api"]
    calib = world["calib"]
    catalogue = {k["name"]: k for k in api.get("/v1/mechanisms").json()["mechanisms"]}
    offered = [n for n, k in catalogue.items() if k["next_query"] and k["calibration"]]
    assert len(offered) > 6
    with dashboard_page(executable, viewport={"width": 1280, "height": 1000}) as page:
        sign_in(page, world["server"].url, ADMIN_KEY)
        open_dataset(page, calib["id"])
        page.wait_for_selector("[data-testid=calibration-table]")
        rows = page.locator("[data-testid=calibration-table] tbody tr")
        assert [rows.nth(i).get_attribute("data-kind") for i in range(rows.count())] == offered
        checked = 0
        for i, name in enumerate(offered):
            kind, row = catalogue[name], rows.nth(i)
            head = row.locator("th")
            assert head.inner_text() == kind["title"]
            assert head.get_attribute("title") == kind["description"]
            assert row.locator("td").first.inner_text() == kind["next_query"]["words"]
            value = row.locator("strong")
            exact = value.get_attribute("data-value")
            if exact is None:  # nothing fits
                continue
            parameter = value.get_attribute("data-parameter") or ""
            number = re.search(r"\d+(?:\.\d+)?(?:e[+-]?\d+)?", value.inner_text())
            assert number is not None, value.inner_text()
            shown, checked = float(number.group()), checked + 1
            if kind["calibration"][parameter] == "min":
                assert shown >= float(exact), (name, shown, exact)
            else:
                assert shown <= float(exact), (name, shown, exact)
        assert checked >= 6
        options = page.locator("#f-kind option")
        assert [options.nth(i).get_attribute("value") for i in range(options.count())] == [
            "",
            *catalogue,
        ]


def test_spend_series_after_a_rebuild_ends_at_the_current_spend(world: dict[str, Any]) -> None:
    """Totals rebuilt from a curve re-derived under corrected formulas raise the spend but not
    the spend each entry stored: with no budget change the chart ended at the last stored
    point ("Spend rises to ε = 0.7419" beside a spend of 0.8684). It ends with the current
    spend, marked "now", wherever the last point is not it."""
    executable = _browser_path()
    api: httpx.Client = world["api"]
    ds = world["rederived"]
    d = api.get(f"/v1/datasets/{ds['id']}").json()
    series = api.get(f"/v1/datasets/{ds['id']}/series").json()
    assert series["points"][-1]["epsilon"] < d["spent"]["epsilon"]
    assert series["budget_changes"] == []
    with dashboard_page(executable, viewport={"width": 1280, "height": 1000}) as page:
        sign_in(page, world["server"].url, ADMIN_KEY)
        open_dataset(page, ds["id"])
        fig = page.locator("#fig-series")
        assert fig.get_attribute("data-delta-changed") == "false"
        assert fig.get_attribute("data-now") == "true"
        desc = page.text_content("[data-testid=chart-series] > desc") or ""
        shown = fmt_dir(d["spent"]["epsilon"], True)
        assert f"Spend rises to ε = {shown} now" in desc and "recomputed from the ledger" in desc
        point = page.locator("[data-testid=chart-series] g.point")
        assert point.count() == 1 and f"now ε = {shown}" in (point.text_content() or "")
        # a series that ends at the spend: no "now" point
        open_dataset(page, world["raised"]["id"])
        assert page.get_attribute("#fig-series", "data-now") == "false"


def test_an_over_budget_dataset_shows_its_true_share(world: dict[str, Any]) -> None:
    """0.8 spent against a budget lowered to 0.5 is 160 %, not "100.0%"."""
    executable = _browser_path()
    over = world["over"]
    with dashboard_page(executable, viewport={"width": 1280, "height": 1000}) as page:
        sign_in(page, world["server"].url, ADMIN_KEY)
        card = page.locator(f"li[data-dataset='{over['id']}']")
        assert "160.0% (over budget)" in (
            card.locator("svg.gauge").get_attribute("aria-label") or ""
        )
        assert card.locator("[data-testid=gauge-pct]").text_content() == "160.0%"
        assert "100.0%" not in card.inner_text()
        open_dataset(page, over["id"])
        spent = page.inner_text("[data-testid=detail-spent]")
        assert "160.0% (over budget)" in spent and "100.0%" not in spent
        # the δ change of "delta-change" left it 141 % spent
        open_dataset(page, world["delta"]["id"])
        assert "(over budget)" in page.inner_text("[data-testid=detail-spent]")


def test_spend_series_after_a_delta_change_ends_at_the_current_spend(
    world: dict[str, Any],
) -> None:
    """The stored points are each at the budget δ of their time: the chart says so and ends
    with the current spend (the API's ``spent``), marked "now"."""
    executable = _browser_path()
    api: httpx.Client = world["api"]
    ds = world["delta"]
    d = api.get(f"/v1/datasets/{ds['id']}").json()
    series = api.get(f"/v1/datasets/{ds['id']}/series").json()
    assert series["points"][-1]["epsilon"] < 1.0 < d["spent"]["epsilon"]
    with dashboard_page(executable, viewport={"width": 1280, "height": 1000}) as page:
        sign_in(page, world["server"].url, ADMIN_KEY)
        open_dataset(page, ds["id"])
        fig = page.locator("#fig-series")
        assert fig.get_attribute("data-delta-changed") == "true"
        caption = fig.locator("figcaption").inner_text()
        assert "when that charge was made" in caption
        desc = page.text_content("[data-testid=chart-series] > desc") or ""
        shown = fmt_dir(d["spent"]["epsilon"], True)
        assert f"Spend rises to ε = {shown} now" in desc and "when that charge was made" in desc
        point = page.locator("[data-testid=chart-series] g.point")
        assert point.count() == 1 and f"now ε = {shown}" in (point.text_content() or "")
        page.click("#fig-series details summary")
        last = page.locator("#fig-series table tbody tr").last.locator("td")
        assert last.nth(0).inner_text() == "now" and last.nth(3).inner_text() == shown
        # an unchanged δ: no "now" point, as before
        open_dataset(page, world["raised"]["id"])
        assert page.get_attribute("#fig-series", "data-delta-changed") == "false"
        assert page.locator("[data-testid=chart-series] g.point").count() == 0


def test_a_budget_change_after_the_last_entry_is_drawn(world: dict[str, Any]) -> None:
    executable = _browser_path()
    with dashboard_page(executable, viewport={"width": 1280, "height": 1000}) as page:
        sign_in(page, world["server"].url, ADMIN_KEY)
        open_dataset(page, world["raised"]["id"])
        assert page.inner_text("#series-marks") == "1 budget change marked by triangles."
        marks = page.locator("[data-testid=chart-series] [data-testid=budget-change]")
        assert marks.count() == 1
        assert "changed to ε = 2" in (marks.locator("title").text_content() or "")


def test_long_names_wrap_and_scrolling_tables_are_focusable(world: dict[str, Any]) -> None:
    """200-character names, a 300-character description and labels wrap (the page is no wider
    than the window, the numbers of the team table stay in view); each scrolling table is
    focusable with a name; axe finds nothing serious at 375 px and 1280 px; a bidi override
    in a label or metadata is isolated in <bdi>."""
    executable = _browser_path()
    a11y: list[str] = []
    problems: list[str] = []
    for width in (1280, 375):
        with dashboard_page(executable, problems, viewport={"width": width, "height": 900}) as page:
            sign_in(page, world["server"].url, ADMIN_KEY)
            for name in ("long", "plain"):
                open_dataset(page, world[name]["id"])
                page.wait_for_selector("[data-testid=holds-table]")
                if name == "long":
                    page.wait_for_selector("#teams:not([hidden]) [data-testid=team-row]")
                scroll = page.evaluate("document.documentElement.scrollWidth")
                assert scroll <= width, (name, width, scroll)
                wraps = page.locator("#detail .table-wrap").evaluate_all(
                    """ws => ws.filter((w) => w.offsetParent !== null).map((w) => ({
                        tab: w.getAttribute('tabindex'), role: w.getAttribute('role'),
                        named: !!(w.getAttribute('aria-label') || w.getAttribute('aria-labelledby'))}))"""
                )
                assert len(wraps) >= 3, wraps
                assert all(w == {"tab": "0", "role": "region", "named": True} for w in wraps), wraps
                if name == "long" and width == 1280:
                    visible = page.locator("[data-testid=team-spent]").first.evaluate(
                        """e => { const w = e.closest('.table-wrap').getBoundingClientRect(),
                        r = e.getBoundingClientRect(); return r.right <= w.right + 1; }"""
                    )
                    assert visible
                    spent_after = page.locator("#entries tbody tr td:nth-child(7)").first
                    assert spent_after.evaluate(
                        """e => e.getBoundingClientRect().right <=
                        e.closest('.table-wrap').getBoundingClientRect().right + 1"""
                    )
                if name == "long":
                    # the spoofing label and metadata value are isolated
                    isolated = page.locator("#entries tbody bdi").evaluate_all(
                        "bs => bs.map((b) => b.textContent)"
                    )
                    assert f"{RLO}spoofed label" in isolated
                    assert f"{RLO}reversed" in isolated and "stats" in isolated
                    desc = page.locator("#detail-description bdi")
                    assert desc.count() == 1 and desc.inner_text() == "x" * 300
                a11y += check_accessibility(page, f"{name} at {width}px")
    assert a11y == [], a11y
    # a calibration kind that does not fit answers 409 (audit item 11d, not fixed here)
    assert [p for p in problems if "status of 409" not in p] == [], problems


def test_history_filters_say_what_they_do(world: dict[str, Any]) -> None:
    """The label filter is labelled as the exact match it is; the Kind filter of refused
    requests is the server's, so a refusal on an older page is found; the entries pager does
    not claim the whole ledger's total under a filter."""
    executable = _browser_path()
    ds = world["filters"]
    with dashboard_page(executable, viewport={"width": 1280, "height": 1000}) as page:
        sign_in(page, world["server"].url, ADMIN_KEY)
        open_dataset(page, ds["id"])
        assert page.inner_text("label[for=f-label]") == "Label is (exact match)"
        assert "contains" not in page.inner_text("#filters")
        page.fill("#f-label", "nightly-report-3")
        page.click("#filters button[type=submit]")
        page.wait_for_function(
            "() => document.querySelectorAll('#entries tbody tr').length === 1"
            " && document.querySelector('#entries tbody').textContent.includes('nightly-report-3')"
        )
        page.fill("#f-label", "")

        # kind: the gaussian refusal is older than 30 laplace ones (a page is 25)
        with page.expect_request(lambda r: "/rejections?" in r.url and "kind=gaussian" in r.url):
            page.select_option("#f-kind", "gaussian")
            page.click("#filters button[type=submit]")
        page.wait_for_function(
            "() => document.querySelector('#rejections tbody').textContent.includes('gauss refused')"
        )
        assert page.locator("#rejections tbody tr").count() == 1
        assert "1 matching refusal" in page.inner_text("#rejections-page")

        # the entries pager: 2 gaussian rows of 7 entries
        page.wait_for_function(
            "() => document.querySelectorAll('#entries tbody tr').length === 2"
            " && document.getElementById('entries-page').textContent.includes('matching')"
        )
        pager = page.inner_text("#entries-page")
        assert "of 7" not in pager and "2 matching entries" in pager, pager
        page.select_option("#f-kind", "")
        page.click("#filters button[type=submit]")
        page.wait_for_function(
            "() => document.getElementById('entries-page').textContent.startsWith('Entries 1–7 of 7')"
        )


def test_an_unreadable_dataset_clears_the_previous_one(world: dict[str, Any]) -> None:
    """A key scoped to "rounding" opens it, then "secret": the page no longer shows
    "rounding", and says why in place."""
    executable = _browser_path()
    with dashboard_page(executable, viewport={"width": 1280, "height": 900}) as page:
        sign_in(page, world["server"].url, world["scoped"])
        open_dataset(page, world["rounding"]["id"])
        assert page.inner_text("#detail-title") == "rounding"
        asked: list[str] = []
        page.on("request", lambda r: asked.append(r.url) if "/v1/" in r.url else None)
        open_dataset(page, world["secret"]["id"])
        assert page.inner_text("#detail-title") != "rounding"
        error = page.locator("[data-testid=detail-error]")
        assert error.is_visible() and "not visible to this key" in error.inner_text()
        assert page.locator("#detail-body").is_hidden()
        assert page.locator("[data-testid=detail-spent]").count() == 0
        # the filters no longer query anything
        n = len(asked)
        page.evaluate("document.getElementById('filters').requestSubmit()")
        assert len(asked) == n
        # back to a readable dataset: drawn again, the error gone
        open_dataset(page, world["rounding"]["id"])
        assert page.inner_text("#detail-title") == "rounding"
        assert page.locator("#detail-body").is_visible() and error.is_hidden()


def test_the_spent_row_of_a_per_block_dataset_says_it_once(world: dict[str, Any]) -> None:
    executable = _browser_path()
    with dashboard_page(executable, viewport={"width": 1280, "height": 900}) as page:
        sign_in(page, world["server"].url, ADMIN_KEY)
        open_dataset(page, world["daily"]["id"])
        text = page.inner_text("[data-testid=detail-spent]")
        assert "the most-spent block" in text
        assert "most-spent block most-spent block" not in text
