"""``/docs`` (Swagger UI) and ``/redoc`` (ReDoc), served entirely from this installation.

FastAPI's default pages load their JavaScript and CSS from a CDN, so they are blank without a
network. Here the assets come from the ``fastapi-offline`` package (Swagger UI, Apache-2.0,
and ReDoc, MIT) under ``/static-docs``. ReDoc's sidebar would still fetch its vendor's logo from
cdn.redoc.ly: the bundle is served with that one URL replaced by an empty inline image. Each
page also carries a Content Security Policy that lets the browser load nothing from any other
origin, should a later bundle reach out again.
"""

from __future__ import annotations

import base64
import hashlib
import re
from pathlib import Path

import fastapi_offline
from fastapi import FastAPI
from fastapi.openapi.docs import (
    get_redoc_html,
    get_swagger_ui_html,
    get_swagger_ui_oauth2_redirect_html,
)
from fastapi.staticfiles import StaticFiles
from starlette.responses import HTMLResponse, Response

ASSETS_DIR = Path(fastapi_offline.__file__).resolve().parent / "static"
ASSETS_URL = "/static-docs"
ASSETS = ("swagger-ui-bundle.js", "swagger-ui.css", "redoc.standalone.js", "favicon.png")

_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)
_REDOC_LOGO = b"https://cdn.redoc.ly/redoc/logo-mini.svg"
_EMPTY_IMAGE = b"data:image/svg+xml,%3Csvg xmlns='http://www.w3.org/2000/svg'/%3E"


def offline_redoc_bundle() -> bytes:
    """ReDoc's bundle without its one request to another origin (the sidebar logo)."""
    return (ASSETS_DIR / "redoc.standalone.js").read_bytes().replace(_REDOC_LOGO, _EMPTY_IMAGE)


def content_security_policy(html: str) -> str:
    """Only this origin, plus the page's own inline scripts by hash (Swagger UI's start-up)
    and inline styles and blob: workers, which both UIs create at run time."""
    hashes = " ".join(
        "'sha256-" + base64.b64encode(hashlib.sha256(s.encode()).digest()).decode() + "'"
        for s in _INLINE_SCRIPT.findall(html)
    )
    return (
        f"default-src 'none'; script-src 'self' {hashes}; style-src 'self' 'unsafe-inline'; "
        "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; "
        "worker-src 'self' blob:; base-uri 'none'; form-action 'self'; frame-ancestors 'none'"
    )


def _offline(page: HTMLResponse) -> HTMLResponse:
    html = bytes(page.body).decode()
    page.headers["Content-Security-Policy"] = content_security_policy(html)
    page.headers["X-Content-Type-Options"] = "nosniff"
    page.headers["Referrer-Policy"] = "no-referrer"
    return page


def install(app: FastAPI, docs_url: str = "/docs", redoc_url: str = "/redoc") -> None:
    """Add the two pages and their assets to ``app`` (built with ``docs_url=None`` and
    ``redoc_url=None``, so FastAPI's CDN-backed pages are not there)."""
    missing = [name for name in ASSETS if not (ASSETS_DIR / name).is_file()]
    if missing:
        raise RuntimeError(f"fastapi-offline ships no {missing} in {ASSETS_DIR}: reinstall it")
    openapi_url = app.openapi_url or "/openapi.json"
    oauth2_redirect_url = f"{docs_url}/oauth2-redirect"
    redoc_bundle = offline_redoc_bundle()
    redoc_js_url = f"{ASSETS_URL}-redoc/redoc.standalone.js"

    @app.get(redoc_js_url, include_in_schema=False)
    def redoc_js() -> Response:
        return Response(redoc_bundle, media_type="text/javascript")

    app.mount(ASSETS_URL, StaticFiles(directory=ASSETS_DIR), name="static-docs")

    @app.get(docs_url, include_in_schema=False)
    def swagger_ui() -> HTMLResponse:
        return _offline(
            get_swagger_ui_html(
                openapi_url=openapi_url,
                title=f"{app.title} - Swagger UI",
                oauth2_redirect_url=oauth2_redirect_url,
                swagger_js_url=f"{ASSETS_URL}/swagger-ui-bundle.js",
                swagger_css_url=f"{ASSETS_URL}/swagger-ui.css",
                swagger_favicon_url=f"{ASSETS_URL}/favicon.png",
                swagger_ui_parameters=app.swagger_ui_parameters,
            )
        )

    @app.get(oauth2_redirect_url, include_in_schema=False)
    def swagger_ui_redirect() -> HTMLResponse:
        return _offline(get_swagger_ui_oauth2_redirect_html())

    @app.get(redoc_url, include_in_schema=False)
    def redoc() -> HTMLResponse:
        return _offline(
            get_redoc_html(
                openapi_url=openapi_url,
                title=f"{app.title} - ReDoc",
                redoc_js_url=redoc_js_url,
                redoc_favicon_url=f"{ASSETS_URL}/favicon.png",
                with_google_fonts=False,
            )
        )


__all__ = [
    "ASSETS_DIR",
    "ASSETS_URL",
    "content_security_policy",
    "install",
    "offline_redoc_bundle",
]
