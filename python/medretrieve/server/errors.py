"""Every failure becomes a JSON body ``{"error": {"type", "message", "field"}}`` with a fitting status; none
sends a traceback.

=====================  ======  ============================================================================
error type             status  when
=====================  ======  ============================================================================
invalid_json           400     the body is not JSON
invalid_request        422     a field is missing, unknown, of the wrong type or out of range (``field``
                               names it), or the library refused a value (ValueError / TypeError)
not_found / method...  404/405 no such endpoint
reload_disabled        403     ``/v1/admin/reload`` on a server started without ``--enable-reload``
reload_running         409     a reload is already running
overloaded             429     shed at once (``Retry-After`` says when to try again)
internal_error         500     a bug (its traceback goes to the server log only)
reload_failed          500     the new collection did not load; the old one is still served
answers_disabled       501     ``/v1/answer`` on a server started without ``--llm`` / ``--model``
not_ready              503     the collection is loading or failed to load (``Retry-After: 1``)
deadline_exceeded      504     the deadline passed while the request waited for a slot (no work was done)
=====================  ======  ============================================================================
"""
from __future__ import annotations

import json
import logging
from typing import Any, Dict, List, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from .admission import Overloaded, QueueTimeout
from .engine import NotReady
from .metrics import ServerMetrics

log = logging.getLogger("medretrieve.server")


class ApiError(Exception):
    """An error the API answers as it is: ``status``, ``type``, ``message`` and the ``field`` at fault."""

    def __init__(self, status: int, type_: str, message: str, field: Optional[str] = None,
                 headers: Optional[Dict[str, str]] = None) -> None:
        super().__init__(message)
        self.status, self.type, self.message, self.field, self.headers = status, type_, message, field, headers


def error_response(status: int, type_: str, message: str, field: Optional[str] = None,
                   headers: Optional[Dict[str, str]] = None, extra: Optional[Dict[str, Any]] = None) -> Response:
    body: Dict[str, Any] = {"type": type_, "message": message, "field": field, **(extra or {})}
    return Response(json.dumps({"error": body}), status_code=status, media_type="application/json",
                    headers=headers)


def _field(loc: Any) -> Optional[str]:
    parts = [str(p) for p in loc if p != "body"]
    return ".".join(parts) or None


def _validation(exc: RequestValidationError) -> Response:
    errors = list(exc.errors())
    if any(e.get("type") == "json_invalid" for e in errors):
        return error_response(400, "invalid_json", "the request body is not valid JSON")
    listed: List[Dict[str, Optional[str]]] = []
    for e in errors:
        name = _field(e.get("loc", ()))
        kind = e.get("type")
        msg = "unknown field" if kind == "extra_forbidden" else str(e.get("msg", "invalid"))
        msg = msg[len("Value error, "):] if msg.startswith("Value error, ") else msg
        if name is None:
            msg = "a JSON request body is required" if kind == "missing" else "the request body must be a JSON object"
        listed.append({"field": name, "message": f"{name}: {msg}" if name else msg})
    first = listed[0] if listed else {"field": None, "message": "invalid request"}
    return error_response(422, "invalid_request", str(first["message"]), first["field"], extra={"errors": listed})


def install(app: FastAPI, metrics: ServerMetrics, endpoint_of: Any) -> None:
    """Register the handlers of the table in the module docstring on ``app``; ``endpoint_of(request)`` is the
    metrics label of a request's endpoint."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        return _validation(exc)

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> Response:
        return error_response(exc.status, exc.type, exc.message, exc.field, exc.headers)

    @app.exception_handler(HTTPException)
    async def _http(request: Request, exc: HTTPException) -> Response:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, "http_error")
        return error_response(exc.status_code, kind, str(exc.detail), headers=getattr(exc, "headers", None))

    @app.exception_handler(NotReady)
    async def _not_ready(request: Request, exc: NotReady) -> Response:
        return error_response(503, "not_ready", str(exc), headers={"Retry-After": "1"})

    @app.exception_handler(Overloaded)
    async def _overloaded(request: Request, exc: Overloaded) -> Response:
        metrics.shed.labels(endpoint_of(request), exc.kind).inc()
        return error_response(429, "overloaded", f"overloaded: {exc.reason}; retry after {exc.retry_after_s} s",
                              headers={"Retry-After": str(exc.retry_after_s)})

    @app.exception_handler(QueueTimeout)
    async def _late(request: Request, exc: QueueTimeout) -> Response:
        metrics.deadline_misses.labels(endpoint_of(request), "queue").inc()
        return error_response(504, "deadline_exceeded", str(exc))

    @app.exception_handler(ValueError)
    @app.exception_handler(TypeError)
    async def _library_refused(request: Request, exc: Exception) -> Response:
        return error_response(422, "invalid_request", str(exc) or type(exc).__name__)

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> Response:
        log.exception("medretrieve: internal error on %s", request.url.path)
        return error_response(500, "internal_error", f"{type(exc).__name__}: {exc}"[:500])
