"""The service's own pages, served from files installed with it (the service runs offline: no CDN).

- ``GET /``: the search page (``medretrieve/assets/web``: plain HTML, CSS and JavaScript, no build step). It asks
  ``POST /v1/search`` and ``POST /v1/answer`` (``"stream": true``) of the same server, and its
  ``Content-Security-Policy`` lets it load and connect to nothing else.
- ``GET /docs``: the OpenAPI documentation in Swagger UI, whose script and style sheet are the ones the
  ``fastapi-offline`` package ships (served under :data:`DOCS_STATIC`). There is no ``/redoc``: ReDoc loads its
  logo from its vendor's CDN.
"""
from __future__ import annotations

import os
from typing import Any

from fastapi import FastAPI
from fastapi.staticfiles import StaticFiles
from starlette.responses import FileResponse, Response
from starlette.types import Scope

from .._assets import ASSETS

try:
    from fastapi_offline import FastAPIOffline
except ImportError as exc:  # pragma: no cover - the serve extra installs it
    raise ImportError("medretrieve.server needs fastapi-offline: pip install 'medretrieve[serve]'") from exc

WEB = ASSETS / "web"
PAGE_STATIC = "/static/page"  # the search page's script and style sheet
DOCS_STATIC = "/static/docs"  # Swagger UI's script and style sheet, from fastapi-offline
# Same-origin only: the page's own files and the API; no inline script or style, no frames, no plugins.
PAGE_POLICY = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
               "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
# on every file of the page, not only on ``/``: the page is also reachable as PAGE_STATIC/index.html
PAGE_HEADERS = {"Content-Security-Policy": PAGE_POLICY, "X-Content-Type-Options": "nosniff"}


def new_app(**fastapi_settings: Any) -> FastAPI:
    """A FastAPI app whose ``/docs`` loads Swagger UI from the installed package instead of a CDN (Swagger UI's
    online validator, which would send the schema out, is off)."""
    return FastAPIOffline(static_url=DOCS_STATIC, redoc_url=None, swagger_ui_parameters={"validatorUrl": None},
                          **fastapi_settings)


class _PageFiles(StaticFiles):
    """The page's files, each with :data:`PAGE_HEADERS`."""

    def file_response(self, full_path: "os.PathLike[str] | str", stat_result: os.stat_result, scope: Scope,
                      status_code: int = 200) -> Response:
        response = super().file_response(full_path, stat_result, scope, status_code)
        response.headers.update(PAGE_HEADERS)
        return response


def add_search_page(app: FastAPI) -> None:
    """Serve the search page at ``/`` and its files under :data:`PAGE_STATIC`."""
    app.mount(PAGE_STATIC, _PageFiles(directory=WEB), name="search-page")

    @app.api_route("/", methods=["GET", "HEAD"], include_in_schema=False)  # HEAD: monitors and link checkers
    async def search_page() -> FileResponse:
        return FileResponse(WEB / "index.html", media_type="text/html",
                            headers={**PAGE_HEADERS, "Cache-Control": "no-cache"})
