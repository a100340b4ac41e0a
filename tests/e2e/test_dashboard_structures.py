"""The dashboard's budget structures (issue 16 item 7) in a real headless Chromium: the team
table of a dataset's allocations and the calendar heatmap of spend per block of a daily
partitioned dataset, compared with the API's numbers; no console errors; axe-core clean."""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterator
from pathlib import Path
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
from tests.live import running


def fmt(x: float) -> str:
    """The page's number format for a spend (``fmtUp`` in charts.js) on the plain values used
    here: 4 significant digits, rounded up unless the short form is the value itself."""
    if x == 0:
        return "0"
    short = float(f"{x:.4g}")
    if short >= x:
        return f"{short:g}"
    step = 10 ** (math.floor(math.log10(abs(x))) - 3)
    return f"{float(f'{short + step:.4g}'):g}"


def day(n: int) -> str:
    """The UTC day key ``n`` days ago."""
    return (dt.datetime.now(dt.UTC).date() - dt.timedelta(days=n)).isoformat()


@pytest.fixture
def world(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """A daily partitioned dataset (budget 1 per block) with two team allocations whose budgets
    add up to more than the dataset's, charged over a few blocks; day 8 used up (0.3 + 0.7)."""
    with running(f"sqlite:///{tmp_path / 'e2e.db'}", ADMIN_KEY) as server:
        api = admin_api(server.url)
        ds = api.post(
            "/v1/datasets",
            json={
                "name": "daily-events",
                "budget": {"epsilon": 1.0, "delta": 1e-6},
                "partition": {"unit": "day"},
                "accounting": "rdp",
            },
        ).json()
        base = f"/v1/datasets/{ds['id']}"
        for name, e in [("team-a", 0.8), ("team-b", 0.7)]:
            r = api.post(
                f"{base}/allocations", json={"name": name, "budget": {"epsilon": e, "delta": 1e-6}}
            )
            assert r.status_code == 201, r.text
        charges = [
            ("team-a", 0.3, day(9), day(7)),
            ("team-a", 0.2, day(3), day(2)),
            ("team-b", 0.7, day(8), day(8)),
            ("team-b", 0.2, day(3), day(3)),
        ]
        for alloc, e, first, last in charges:
            r = api.post(
                f"{base}/charges",
                json={
                    "mechanism": {"mechanism": "laplace", "epsilon": e},
                    "allocation": alloc,
                    "blocks": {"from": first, "to": last},
                    "label": f"{alloc}-{first}",
                },
            )
            assert r.status_code == 201, r.text
        viewer = api.post("/v1/keys", json={"role": "viewer"}).json()["key"]
        yield {"server": server, "api": api, "ds": ds, "viewer": viewer}
        api.close()


def test_team_table_and_block_heatmap_match_the_api(world: dict[str, Any]) -> None:
    executable = _browser_path()

    api: httpx.Client = world["api"]
    ds = world["ds"]
    base = f"/v1/datasets/{ds['id']}"
    allocs = {a["name"]: a for a in api.get(f"{base}/allocations").json()["allocations"]}
    assert set(allocs) == {"team-a", "team-b"}
    blocks = api.get(f"{base}/blocks", params={"from": day(20), "to": day(0)}).json()["blocks"]
    charged = {b["block"]: b for b in blocks if b["entries"]}
    assert set(charged) == {day(n) for n in (9, 8, 7, 3, 2)}
    exhausted = [k for k, b in charged.items() if b["exhausted"]]
    assert exhausted == [day(8)]
    budget = api.get(f"{base}/budget").json()
    assert budget["blocks"]["exhausted_blocks"] == 1
    assert budget["blocks"]["charged_blocks"] == 5

    problems: list[str] = []
    a11y: list[str] = []
    with dashboard_page(executable, problems, viewport={"width": 1280, "height": 1000}) as page:
        sign_in(page, world["server"].url, world["viewer"])
        page.goto(world["server"].url + f"/#/datasets/{ds['id']}")
        page.wait_for_selector("body[data-ready=true] #detail:not([hidden])")
        page.wait_for_selector("#teams:not([hidden]) [data-testid=team-row]")

        # the team table: one row per allocation, the API's numbers, a gauge in its state
        rows = page.locator("[data-testid=team-row]")
        assert rows.count() == len(allocs)
        for name, a in allocs.items():
            row = page.locator(f"[data-testid=team-row][data-allocation='{name}']")
            for field, want in [
                ("team-budget", a["budget"]["epsilon"]),
                ("team-spent", a["spent"]["epsilon"]),
                ("team-remaining", a["remaining"]["epsilon"]),
                ("team-entries", a["entries"]),
            ]:
                got = row.locator(f"[data-testid={field}]").get_attribute("data-value")
                assert got is not None and math.isclose(float(got), want), (name, field)
            st = (
                "exhausted"
                if a["exhausted"]
                else ("warning" if a["spent"]["epsilon"] / a["budget"]["epsilon"] >= 0.8 else "ok")
            )
            assert row.get_attribute("data-state") == st
            label = row.locator("svg.gauge").get_attribute("aria-label") or ""
            pct = floor_pct(a["spent"]["epsilon"], a["budget"]["epsilon"], st == "exhausted")
            assert pct in label and name in label
            assert row.locator("[data-testid=state] svg .state-icon").count() == 1
            assert row.locator("[data-testid=team-block]").inner_text() == (
                a["most_spent_block"] or "none charged"
            )
        note = page.inner_text("#teams-note")
        assert "more than the dataset" in note and "guarantee" in note

        # the heatmap: a cell per day of the last 12 weeks, charged ones as the API says
        page.wait_for_selector("#blocks:not([hidden]) [data-testid=block-cell]")
        cells = page.locator("[data-testid=chart-blocks] [data-testid=block-cell]")
        keys = [cells.nth(i).get_attribute("data-block") for i in range(cells.count())]
        # the page's today (its last cell): this test's own date, or the day before when UTC
        # midnight passed between the page drawing and this line
        today = dt.date.fromisoformat(str(keys[-1]))
        now = dt.datetime.now(dt.UTC).date()
        assert today in (now, now - dt.timedelta(days=1)), keys[-1]
        monday = today - dt.timedelta(days=today.weekday())
        start = monday - dt.timedelta(weeks=11)
        want_keys = [
            (start + dt.timedelta(days=i)).isoformat() for i in range((today - start).days + 1)
        ]
        assert keys == want_keys
        listing = api.get(f"{base}/blocks", params={"from": want_keys[0], "to": want_keys[-1]})
        by_key = {b["block"]: b for b in listing.json()["blocks"]}
        got_cells = page.evaluate(
            """() => [...document.querySelectorAll('[data-testid=chart-blocks] [data-testid=block-cell]')]
            .map((c) => ({key: c.dataset.block, spent: Number(c.dataset.spent),
              exhausted: c.dataset.exhausted === 'true', label: c.getAttribute('aria-label'),
              title: c.querySelector('title').textContent, role: c.getAttribute('role')}))"""
        )
        for cell in got_cells:
            key = cell["key"]
            b = by_key.get(key)
            spent = b["spent"]["epsilon"] if b else 0.0
            assert cell["spent"] == spent, key
            assert cell["label"].startswith(f"{key}: {fmt(spent)} of 1 used"), cell
            assert cell["title"] == cell["label"] and cell["role"] == "img"
            assert cell["exhausted"] == bool(b and b["exhausted"]), key
        assert [c["label"] for c in got_cells if c["key"] == day(8)] == [
            f"{day(8)}: 1 of 1 used, exhausted"
        ]
        for key in charged:
            assert (
                page.locator(f"[data-testid=block-cell][data-block='{key}']").get_attribute(
                    "data-step"
                )
                != "h0"
            )
        ex_cell = page.locator(f"[data-testid=block-cell][data-block='{day(8)}']")
        assert ex_cell.locator("path.cross").count() == 1  # a symbol, not colour alone
        assert "exhausted" in (ex_cell.get_attribute("aria-label") or "")
        assert day(8) in page.inner_text("[data-testid=blocks-exhausted]")
        assert "Exhausted" in page.inner_text("[data-testid=blocks-exhausted]")
        assert "own budget" in page.inner_text("[data-testid=blocks-note]")
        assert "crossed" in page.inner_text("#fig-blocks")  # the legend
        # every legend item inside the drawing (the last one, "exhausted (crossed)", ran past
        # its right edge and was clipped to "exhausted ("): user units of the SVG's viewBox
        overflow = page.evaluate(
            """() => { const svg = document.querySelector('[data-testid=chart-blocks]');
              const width = svg.viewBox.baseVal.width, height = svg.viewBox.baseVal.height;
              return [...svg.querySelectorAll('.heat-legend g')].map((g) => g.getBBox())
                .filter((b) => b.x < 0 || b.x + b.width > width || b.y + b.height > height)
                .map((b) => [b.x, b.width, width]); }"""
        )
        assert overflow == [], overflow

        # the ledger names the team each entry was charged to, beside the key ("charged by")
        page.wait_for_selector("#entries tbody tr td")
        charged_by = page.evaluate(
            """() => [...document.querySelectorAll('#entries tbody tr')].map((tr) =>
              [tr.cells[3].textContent, tr.cells[4].textContent])"""
        )
        assert len(charged_by) == 4, charged_by
        for label, by in charged_by:
            team = label.rsplit("-", 3)[0]  # "team-a-2026-11-16" -> "team-a"
            assert by.endswith(f"({team})"), (label, by)

        top = budget["blocks"]["most_spent"]
        assert page.get_attribute("[data-testid=blocks-most-spent]", "data-value") == top["block"]
        assert page.inner_text("[data-testid=blocks-exhausted-count]") == "1"
        assert page.inner_text("[data-testid=blocks-charged]") == "5"
        lifetime = page.get_attribute("[data-testid=blocks-lifetime]", "data-value")
        assert lifetime is not None and float(lifetime) == budget["lifetime"]["spent"]["epsilon"]

        a11y += check_accessibility(page, "partitioned dataset")
    assert problems == [], problems
    assert a11y == [], a11y


def test_a_partitioned_dataset_without_a_lifetime_budget_shows_its_most_spent_block(
    tmp_path: Path,
) -> None:
    """Four days each charged epsilon 0.6 of a per-block budget of 1, no lifetime budget: the
    charges compose to about 2.4, which no budget caps. The overview card showed "Within budget:
    99.9% used" and a full gauge (2.4 against the per-block 1) and the spend chart a line at 1
    under a spend of 2.4; it now shows the most-spent block (/budget's blocks.most_spent)
    against the per-block budget, and the charts draw no budget under the composed spend. A
    second dataset with a lifetime budget keeps the composed spend against that budget."""
    executable = _browser_path()
    with running(f"sqlite:///{tmp_path / 'e2e.db'}", ADMIN_KEY) as server:
        api = admin_api(server.url)
        made = {}
        # clicks and views: four days of 0.6 each; alerts (a third): one day charged 0.9 of its
        # 1, past the warning threshold (0.8)
        every_day = [(n, 0.6) for n in (4, 3, 2, 1)]
        for name, lifetime, charged in [
            ("clicks", None, every_day),
            ("views", {"epsilon": 8.0, "delta": 1e-6}, every_day),
            ("alerts", None, [(2, 0.9)]),
        ]:
            body: dict[str, Any] = {
                "name": name,
                "budget": {"epsilon": 1.0, "delta": 1e-6},
                "partition": {"unit": "day"},
                "adaptive": False,
            }
            if lifetime is not None:
                body["lifetime_budget"] = lifetime
            made[name] = api.post("/v1/datasets", json=body).json()
            for n, epsilon in charged:
                charge = {
                    "mechanism": {"mechanism": "laplace", "epsilon": epsilon},
                    "blocks": {"from": day(n), "to": day(n)},
                }
                r = api.post(f"/v1/datasets/{made[name]['id']}/charges", json=charge)
                assert r.status_code == 201, r.text
        alerts = made["alerts"]
        # the API's state stays "ok" (a new block has a fresh budget)
        assert api.get(f"/v1/datasets/{alerts['id']}/budget").json()["state"] == "ok"
        viewer = api.post("/v1/keys", json={"role": "viewer"}).json()["key"]
        clicks, views = made["clicks"], made["views"]
        d = api.get(f"/v1/datasets/{clicks['id']}").json()
        budget = api.get(f"/v1/datasets/{clicks['id']}/budget").json()
        top = budget["blocks"]["most_spent"]
        # the ledger: 4 x 0.6 composed; the block: one 0.6 of its 1 (pure bounds, exact)
        assert d["spent"]["pure_epsilon"] == pytest.approx(2.4)
        assert top["spent"]["pure_epsilon"] == pytest.approx(0.6) and top["block"] == day(4)
        block_pct = floor_pct(top["spent"]["epsilon"], d["budget"]["epsilon"], top["exhausted"])
        wrong_pct = floor_pct(d["spent"]["epsilon"], d["budget"]["epsilon"], False)
        assert block_pct != wrong_pct and wrong_pct.endswith("(over budget)")
        v = api.get(f"/v1/datasets/{views['id']}").json()
        assert v["spent"]["pure_epsilon"] == pytest.approx(2.4)  # 30 % of its lifetime 8
        lifetime_pct = floor_pct(v["spent"]["epsilon"], v["lifetime_budget"]["epsilon"], False)

        problems: list[str] = []
        with dashboard_page(executable, problems, viewport={"width": 1280, "height": 1000}) as page:
            sign_in(page, server.url, viewer)
            card = page.locator(f"li[data-dataset='{clicks['id']}']")
            label = card.locator("svg.gauge").get_attribute("aria-label") or ""
            assert block_pct in label and top["block"] in label and wrong_pct not in label
            assert "99.9%" not in label and "100.0%" not in label
            assert card.locator("svg.gauge").get_attribute("data-block") == top["block"]
            badge = card.locator("[data-testid=state]").inner_text()
            assert f"most-spent block {top['block']} {block_pct} used" in badge
            assert card.get_attribute("data-state") == "ok"  # its top block at 60 %
            # the badge warns when the most-spent block is past the threshold (the gauge beside
            # it shows that block); before, it kept the API's "ok" under a 90 % gauge
            acard = page.locator(f"li[data-dataset='{alerts['id']}']")
            assert acard.get_attribute("data-state") == "warning"
            abadge = acard.locator("[data-testid=state]")
            assert abadge.get_attribute("data-state") == "warning"
            assert f"Warning: most-spent block {day(2)} 90.0% used" in abadge.inner_text()
            assert wrong_pct not in card.inner_text()
            value = card.locator("[data-testid=spent]").get_attribute("data-value")
            assert value is not None and float(value) == d["spent"]["epsilon"]
            # with a lifetime budget: the composed spend against it, as before
            vcard = page.locator(f"li[data-dataset='{views['id']}']")
            assert lifetime_pct in (vcard.locator("svg.gauge").get_attribute("aria-label") or "")
            assert (
                f"Within budget: {lifetime_pct} of the lifetime budget used" in vcard.inner_text()
            )

            page.goto(server.url + f"/#/datasets/{clicks['id']}")
            page.wait_for_selector("body[data-ready=true] #detail:not([hidden])")
            assert block_pct in page.inner_text("[data-testid=detail-status]")
            assert wrong_pct not in page.inner_text("#summary")
            fig = page.locator("#fig-series")
            assert fig.get_attribute("data-budget-scope") == "per_block"
            chart = page.locator("[data-testid=chart-series]")
            assert chart.locator("g[data-series]").get_attribute("data-n") == "4"
            assert chart.locator("g.hline:not(.legend)").count() == 0  # no budget line
            assert "no lifetime budget" in (chart.text_content() or "")
            rdp = page.locator("[data-testid=chart-rdp] g[data-series]")
            assert rdp.count() == 1 and rdp.get_attribute("data-series") == "ledger"

            page.goto(server.url + f"/#/datasets/{views['id']}")
            # the page of the second dataset, drawn (its title set and the page ready again)
            page.wait_for_function(
                "() => document.body.dataset.ready === 'true'"
                " && document.getElementById('detail-title').textContent === 'views'"
            )
            assert lifetime_pct in page.inner_text("[data-testid=detail-status]")
            assert page.locator("#fig-series").get_attribute("data-budget-scope") == "lifetime"
            line = page.locator("[data-testid=chart-series] g.hline:not(.legend)")
            assert line.count() == 1
            assert page.locator("[data-testid=chart-rdp] g[data-series]").count() == 2
        api.close()
    assert problems == [], problems
