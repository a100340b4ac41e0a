"""The privacy officer's view in a real headless Chromium: states the other dashboard tests do
not build, each compared with the API's JSON for the same state (a spend with no finite bound,
a partitioned dataset whose lifetime budget has room but one block is used up, the server
going away, an archived dataset shown on request, the page's requests staying on this origin,
axe-core on each of these states)."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.e2e.test_dashboard import (
    ADMIN_KEY,
    _browser_path,
    admin_api,
    check_accessibility,
    dashboard_page,
    floor_pct,
    sign_in,
)
from tests.e2e.test_dashboard_audit import charge_dataset, create_dataset, open_dataset
from tests.e2e.test_dashboard_structures import day
from tests.live import running

MARKUP = {
    "description": "<img src=x onerror=\"document.title='pwned-1'\"> études",
    "label": "<script>document.title='pwned-2'</script>名前",
    "meta_key": "<i>k</i>",
    "meta_value": "<img src=y onerror=\"document.title='pwned-3'\">",
    "hold": "<svg onload=\"document.title='pwned-4'\">",
    "refused": "<b>refused</b> & more",
}


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    db = tmp_path_factory.mktemp("officer") / "e2e.db"
    with running(f"sqlite:///{db}", ADMIN_KEY) as server:
        api = admin_api(server.url)

        dataset = functools.partial(create_dataset, api)
        charge = functools.partial(charge_dataset, api)

        w: dict[str, Any] = {"server": server, "api": api}
        # an entry with its own delta, then the budget delta lowered below it: no finite
        # epsilon at the budget delta any more (the API's spent.epsilon is null)
        w["unbounded"] = dataset("own-delta-lowered", 1.0, 1e-5, adaptive=False)
        charge(w["unbounded"], {"mechanism": "approx_dp", "epsilon": 0.1, "delta": 4e-6})
        r = api.patch(f"/v1/datasets/{w['unbounded']['id']}", json={"budget": {"delta": 3e-6}})
        assert r.status_code == 200, r.text
        w["plain"] = dataset("plain", 1.0)
        charge(w["plain"], {"mechanism": "laplace", "epsilon": 0.25})
        # a daily dataset whose lifetime budget has room while yesterday's block is used up
        w["lifetime"] = dataset(
            "daily-with-lifetime",
            1.0,
            partition={"unit": "day"},
            lifetime_budget={"epsilon": 4.0, "delta": 1e-6},
        )
        charge(
            w["lifetime"],
            {"mechanism": "laplace", "epsilon": 1.0},
            blocks={"from": day(1), "to": day(1)},
        )
        charge(
            w["lifetime"],
            {"mechanism": "laplace", "epsilon": 0.2},
            blocks={"from": day(0), "to": day(0)},
        )
        w["zcdp"] = dataset("zcdp-adaptive", 1.0, accounting="zcdp")
        charge(w["zcdp"], {"mechanism": "gaussian", "sigma": 10.0})
        w["gauss"] = dataset("gaussian-only", 1.0, allowed_mechanisms=["gaussian"])
        charge(w["gauss"], {"mechanism": "gaussian", "sigma": 8.0})
        w["fixed"] = dataset("fixed-list", 1.0, adaptive=False)
        charge(w["fixed"], {"mechanism": "gaussian", "sigma": 8.0})
        charge(w["fixed"], {"mechanism": "laplace", "epsilon": 0.1})
        w["archived"] = dataset("finished-study", 1.0)
        charge(w["archived"], {"mechanism": "laplace", "epsilon": 0.4})
        r = api.post(f"/v1/datasets/{w['archived']['id']}/archive")
        assert r.status_code == 200, r.text
        # text written by users, with markup in it: shown as text, never as markup
        w["markup"] = dataset("markup", 1.0, description=MARKUP["description"])
        charge(
            w["markup"],
            {"mechanism": "laplace", "epsilon": 0.01},
            label=MARKUP["label"],
            metadata={MARKUP["meta_key"]: MARKUP["meta_value"]},
        )
        r = api.post(
            f"/v1/datasets/{w['markup']['id']}/reservations",
            json={
                "mechanism": {"mechanism": "laplace", "epsilon": 0.01},
                "ttl_seconds": 3600,
                "label": MARKUP["hold"],
            },
        )
        assert r.status_code == 201, r.text
        r = api.post(
            f"/v1/datasets/{w['markup']['id']}/charges",
            json={
                "mechanism": {"mechanism": "laplace", "epsilon": 5.0},
                "label": MARKUP["refused"],
            },
        )
        assert r.status_code == 409, r.text
        w["viewer"] = api.post("/v1/keys", json={"role": "viewer"}).json()["key"]
        yield w
        api.close()


METHOD_WORDS = {
    "gaussian_exact": "converted exactly: every charge is Gaussian",
    "pure_dp": "the sum of the charges' ε, a pure-DP composition",
    "rdp_improved": "converted from Rényi DP at the best order",
    "zcdp_bun_steinke": "converted from zCDP ρ by the Bun–Steinke bound",
    "zcdp_cks": "converted from zCDP ρ by the Canonne–Kamath–Steinke bound",
    "rdp_fixed_orders": "converted from Rényi DP at the order fixed when the dataset was created",
    "entry_deltas_reach_delta": "no finite ε: the entries' own δ add up to the budget δ or more",
}
"""The words for the conversions these datasets' spends come from, written out independently
of app.js."""


def test_the_spend_names_its_conversion_in_words(world: dict[str, Any]) -> None:
    """Each dataset's "Spent" row says in words which conversion gave the spend (the API's
    ``spent.method``), with the method's name beside it, not the name alone."""
    executable = _browser_path()
    api: httpx.Client = world["api"]
    names = ["plain", "unbounded", "lifetime", "zcdp", "gauss", "fixed"]
    methods = {
        n: api.get(f"/v1/datasets/{world[n]['id']}").json()["spent"]["method"] for n in names
    }
    assert len(set(methods.values())) >= 4, methods  # several conversions are met
    with dashboard_page(executable, viewport={"width": 1280, "height": 900}) as page:
        sign_in(page, world["server"].url, world["viewer"])
        for n in names:
            open_dataset(page, world[n]["id"])
            text = page.inner_text("[data-testid=detail-spent]")
            m = methods[n]
            assert f"{METHOD_WORDS[m]}" in text and f"method {m})" in text, (n, text)


def test_a_spend_with_no_finite_bound_reads_as_unbounded(world: dict[str, Any]) -> None:
    """Entries' own deltas past the (lowered) budget delta: the API's spend is null (no finite
    epsilon) and the dataset exhausted. The page must not read that as nothing used (0.0 %, an
    empty gauge) nor as "n/a": the spend is infinite, the gauge full."""
    executable = _browser_path()
    api: httpx.Client = world["api"]
    ds_id = world["unbounded"]["id"]
    d = api.get(f"/v1/datasets/{ds_id}").json()
    assert d["spent"]["epsilon"] is None and d["exhausted"] and d["state"] == "exhausted"
    with dashboard_page(executable, viewport={"width": 1280, "height": 900}) as page:
        sign_in(page, world["server"].url, world["viewer"])
        card = page.locator(f"li[data-dataset='{ds_id}']")
        assert card.get_attribute("data-state") == "exhausted"
        assert card.locator("[data-testid=spent]").inner_text().startswith("ε = ∞")
        pct = card.locator("[data-testid=gauge-pct]").text_content() or ""
        assert "∞" in pct and "0.0" not in pct
        # the gauge's arc is drawn full, not empty
        assert card.locator("svg.gauge path.fill").count() == 1
        label = card.locator("svg.gauge").get_attribute("aria-label") or ""
        assert "n/a" not in label and "0.0%" not in label and "∞" in label
        open_dataset(page, ds_id)
        spent = page.inner_text("[data-testid=detail-spent]")
        assert spent.startswith("ε = ∞") and "n/a" not in spent and "0.0%" not in spent
        assert "own δ" in spent  # why there is no finite epsilon, in words
        # the series' data table ends with the current spend, "now": infinite
        now = page.locator("#fig-series table tbody tr").last.text_content() or ""
        assert now.startswith("now") and now.endswith("∞"), now
        assert page.inner_text("#status").startswith(f"{d['name']}: ε = ∞")
        # the ledger's "spent ε after" is at the budget δ of each entry's time (1e-5 here, the
        # budget's now 3e-6): the column says so
        head = page.locator("#entries thead th").last.inner_text()
        assert "budget δ of its time" in head, head
        problems = check_accessibility(page, "unbounded spend")
        assert not problems, problems


def test_the_server_going_away_is_said_at_the_top_and_cleared_when_it_is_back(
    world: dict[str, Any],
) -> None:
    """Every request refused at the network level (as when the server is gone): the figures
    stay on screen, so the page must say at the top, in an alert, that they are from the last
    update and may be out of date, and stop saying "Updated" as if they were current. When
    the server answers again, the warning goes."""
    executable = _browser_path()
    plain = world["plain"]
    with dashboard_page(executable, viewport={"width": 1280, "height": 900}) as page:
        sign_in(page, world["server"].url, world["viewer"])
        open_dataset(page, plain["id"])
        stale = page.locator("[data-testid=stale]")
        assert stale.is_hidden()
        updated = page.inner_text("#updated")
        assert updated.startswith("Updated ")
        page.route("**/v1/**", lambda route: route.abort("connectionrefused"))
        page.click("#refresh")
        stale.wait_for(state="visible")
        text = stale.inner_text()
        assert "could not be reached" in text and "out of date" in text
        assert updated.removeprefix("Updated ") in text  # the time of the figures shown
        assert stale.get_attribute("role") == "alert"
        # above the figures: the first thing in the page's main content
        box, summary = stale.bounding_box(), page.locator("#summary").bounding_box()
        assert box is not None and summary is not None and box["y"] < summary["y"]
        assert not page.inner_text("#updated").startswith("Updated ")
        # the figures still shown are the API's (not blanked, not changed)
        assert page.get_attribute("[data-testid=detail-spent]", "data-value") == str(
            world["api"].get(f"/v1/datasets/{plain['id']}").json()["spent"]["epsilon"]
        )
        problems = check_accessibility(page, "server unreachable")
        assert not problems, problems
        page.unroute("**/v1/**")
        page.click("#refresh")
        stale.wait_for(state="hidden")
        assert page.inner_text("#updated").startswith("Updated ")


def test_an_exhausted_block_under_a_lifetime_budget_with_room_is_a_warning(
    world: dict[str, Any],
) -> None:
    """A partitioned dataset with a lifetime budget: the API's state follows the lifetime
    budget ("ok" while it has room), but a charge reading the exhausted block is refused. The
    badge must not say "Within budget" alone: it warns and names the block, as it does for a
    partitioned dataset without a lifetime budget; the gauge stays the lifetime share."""
    executable = _browser_path()
    api: httpx.Client = world["api"]
    ds_id = world["lifetime"]["id"]
    b = api.get(f"/v1/datasets/{ds_id}/budget").json()
    top = b["blocks"]["most_spent"]
    assert b["state"] == "ok" and top["exhausted"] and not b["exhausted"]
    share = floor_pct(b["spent"]["epsilon"], b["lifetime"]["budget"]["epsilon"], False)
    with dashboard_page(executable, viewport={"width": 1280, "height": 900}) as page:
        sign_in(page, world["server"].url, world["viewer"])
        card = page.locator(f"li[data-dataset='{ds_id}']")
        assert card.get_attribute("data-state") == "warning"
        badge = card.locator("[data-testid=state]").inner_text()
        assert "Warning: " in badge and top["block"] in badge and "exhausted" in badge
        assert card.locator("[data-testid=gauge-pct]").text_content() == share
        open_dataset(page, ds_id)
        status = page.inner_text("[data-testid=detail-status]")
        assert f"Warning: {share} of the lifetime budget used" in status, status
        assert f"most-spent block {top['block']} exhausted" in status
        assert f"{share} of the lifetime budget" in page.inner_text("[data-testid=detail-spent]")
        problems = check_accessibility(page, "exhausted block under a lifetime budget")
        assert not problems, problems


def test_an_archived_dataset_is_shown_on_request_and_says_why_nothing_fits(
    world: dict[str, Any],
) -> None:
    """Hidden from the default overview, shown with its badge when asked; its page says that
    no query fits because it is archived (it said "nothing fits the remaining budget" for
    every kind, with budget left, after a refused calibration each), and asks no calibration."""
    executable = _browser_path()
    api: httpx.Client = world["api"]
    ds_id = world["archived"]["id"]
    listed = {d["id"] for d in api.get("/v1/datasets").json()["datasets"]}
    every = {
        d["id"] for d in api.get("/v1/datasets", params={"archived": "all"}).json()["datasets"]
    }
    assert ds_id not in listed and ds_id in every
    d = api.get(f"/v1/datasets/{ds_id}").json()
    assert d["archived"] and d["remaining"]["epsilon"] > 0
    with dashboard_page(executable, viewport={"width": 1280, "height": 900}) as page:
        sign_in(page, world["server"].url, world["viewer"])
        assert page.locator(f"li[data-dataset='{ds_id}']").count() == 0
        page.check("#show-archived")
        card = page.locator(f"li[data-dataset='{ds_id}']")
        card.wait_for()
        assert card.locator("[data-testid=archived]").inner_text() == "Archived: read-only"
        assert page.locator("#dataset-list li.card").count() == len(every)
        problems = check_accessibility(page, "overview with archived datasets")
        assert not problems, problems
        asked: list[str] = []
        page.on("request", lambda r: asked.append(r.url) if "/calibrate" in r.url else None)
        open_dataset(page, ds_id)
        box = page.locator("#calibration")
        box.get_by_text("archived").wait_for()
        assert "nothing fits the remaining budget" not in box.inner_text()
        assert not asked


def test_text_written_by_users_is_shown_as_text(world: dict[str, Any]) -> None:
    """A description, a label, metadata, a hold's label and a refused request's label with
    markup in them: the page shows each as the text it is; no element of it is made and no
    script of it runs."""
    executable = _browser_path()
    with dashboard_page(executable, viewport={"width": 1280, "height": 900}) as page:
        sign_in(page, world["server"].url, world["viewer"])
        open_dataset(page, world["markup"]["id"])
        assert page.inner_text("#detail-description") == MARKUP["description"]
        entries = page.inner_text("#entries")
        assert MARKUP["label"] in entries
        assert f"{MARKUP['meta_key']}: {MARKUP['meta_value']}" in entries
        assert MARKUP["hold"] in page.inner_text("#holds")
        assert MARKUP["refused"] in page.inner_text("#rejections")
        assert page.locator("main img, main script, main b, main i, #holds svg").count() == 0
        assert "pwned" not in page.title()


def test_no_request_leaves_the_server_s_origin(world: dict[str, Any]) -> None:
    """The overview (archived datasets shown), every dataset's page and the glossary of the
    accounting rules, with an admin key: every request the page makes goes to the server
    itself (or is a data: / blob: URL), none to another host."""
    executable = _browser_path()
    api: httpx.Client = world["api"]
    url = world["server"].url
    every = api.get("/v1/datasets", params={"archived": "all"}).json()["datasets"]
    asked: list[str] = []
    with dashboard_page(executable, viewport={"width": 1280, "height": 900}) as page:
        page.on("request", lambda r: asked.append(r.url))
        sign_in(page, url, ADMIN_KEY)
        page.check("#show-archived")
        page.locator("#dataset-list li.card").nth(len(every) - 1).wait_for()
        for d in every:
            open_dataset(page, d["id"])
            assert page.inner_text("#detail-title") == d["name"]
        page.click("[data-testid=accounting] a")
        page.wait_for_selector("dl.glossary")
    assert len(asked) > 5 * len(every)  # the walk made its requests
    elsewhere = [u for u in asked if not u.startswith((url + "/", "data:", "blob:"))]
    assert not elsewhere, elsewhere
