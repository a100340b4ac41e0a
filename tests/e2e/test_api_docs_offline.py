"""/docs (Swagger UI) and /redoc (ReDoc) render in a real headless Chromium with every request
that is not for the local server blocked: their scripts and styles come from the installed
package (fastapi-offline), not a CDN, and
a Content Security Policy keeps the browser from loading anything from another origin. Zero failed requests, zero blocked, zero console errors.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import httpx
import pytest

from tests.e2e.test_dashboard import _browser_path, headless_chromium
from tests.live import Server, running

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

ADMIN_KEY = "docs-admin-key-0123456789-abcdefghijklmnop"
LOCAL = {"127.0.0.1", "localhost"}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[Server]:
    with running(f"sqlite:///{tmp_path / 'docs.db'}", ADMIN_KEY) as s:
        yield s


class Watch:
    """Blocks every request to another host and records anything that went wrong."""

    def __init__(self) -> None:
        self.local: list[str] = []
        self.blocked: list[str] = []
        self.failed: list[str] = []
        self.errors: list[str] = []

    def route(self, route: Any) -> None:
        url = route.request.url
        if urlparse(url).hostname in LOCAL:
            self.local.append(url)
            route.continue_()
        else:
            self.blocked.append(url)
            route.abort()

    def attach(self, page: Any) -> None:
        page.on("requestfailed", lambda r: self.failed.append(f"{r.url}: {r.failure}"))
        page.on(
            "response",
            lambda r: self.failed.append(f"{r.url}: HTTP {r.status}") if r.status >= 400 else None,
        )
        page.on("console", lambda m: self.errors.append(m.text) if m.type in ("error",) else None)
        page.on("pageerror", lambda e: self.errors.append(f"page error: {e}"))


def test_swagger_ui_and_redoc_render_without_a_network(server: Server) -> None:
    executable = _browser_path()
    spec = httpx.get(f"{server.url}/openapi.json", timeout=120).json()
    operations = [
        (method, path, op)
        for path, item in spec["paths"].items()
        for method, op in item.items()
        if method in ("get", "post", "put", "patch", "delete")
    ]
    watch = Watch()
    with headless_chromium(executable) as browser:
        context = browser.new_context(viewport={"width": 1280, "height": 1000})
        context.route("**/*", watch.route)
        page = context.new_page()
        watch.attach(page)

        page.goto(f"{server.url}/docs")
        page.wait_for_selector(".swagger-ui .info .title")
        assert "privacy-ledger" in page.inner_text(".swagger-ui .info .title")
        page.wait_for_selector(".swagger-ui .opblock")
        assert page.locator(".swagger-ui .opblock").count() == len(operations)
        charge = next(op for m, path, op in operations if path.endswith("/charges"))
        assert page.get_by_text(charge["summary"]).count() >= 1

        page.goto(f"{server.url}/redoc")
        page.wait_for_selector("redoc h1, [role=main] h1, h1")
        assert "privacy-ledger" in page.inner_text("h1")
        page.locator("h2", has_text=charge["summary"]).wait_for()  # the operation's section
        assert page.locator("h2").count() >= len(operations)

    assert watch.blocked == [], "the API pages reached for another host"
    assert watch.failed == [] and watch.errors == []
    assert any("/static-docs/swagger-ui-bundle.js" in u for u in watch.local)
    assert any("/static-docs-redoc/redoc.standalone.js" in u for u in watch.local)
