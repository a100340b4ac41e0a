"""/docs and /redoc reference only this server, with a policy that forbids other origins (the
browser test, tests/e2e/test_api_docs_offline.py, renders them with the network blocked)."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient

from app.api_docs import content_security_policy


@pytest.mark.parametrize("page", ["/docs", "/redoc", "/docs/oauth2-redirect"])
def test_pages_load_nothing_from_another_origin(sqlite_client: TestClient, page: str) -> None:
    r = sqlite_client.get(page)
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    csp = r.headers["content-security-policy"]
    assert csp == content_security_policy(r.text)
    assert "default-src 'none'" in csp and "http" not in csp and "*" not in csp
    for url in re.findall(r"""(?:src|href)=["']([^"']+)""", r.text):
        assert url.startswith("/"), url  # same origin
        assert sqlite_client.get(url).status_code == 200, url


def test_swagger_ui_start_up_script_is_allowed_by_hash(sqlite_client: TestClient) -> None:
    r = sqlite_client.get("/docs")
    assert (
        "SwaggerUIBundle(" in r.text
        and "'unsafe-inline'" not in r.headers["content-security-policy"].split("style-src")[0]
    )
    assert re.search(
        r"script-src 'self' 'sha256-[A-Za-z0-9+/=]+'", r.headers["content-security-policy"]
    )


def test_the_served_redoc_bundle_has_no_url_of_another_origin_to_load(
    sqlite_client: TestClient,
) -> None:
    html = sqlite_client.get("/redoc").text
    (bundle,) = re.findall(r'<script src="([^"]+redoc[^"]+)"', html)
    js = sqlite_client.get(bundle).text
    assert "cdn.redoc.ly" not in js and len(js) > 500_000
