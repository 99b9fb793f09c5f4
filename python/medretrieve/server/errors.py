"""Every failure becomes a JSON body ``{"error": {"type", "message", "field"}}`` with a fitting status; none
sends a traceback. The types and their statuses are ``medretrieve.wire.ERROR_TYPES``:

=====================  ======  ============================================================================
error type             status  when
=====================  ======  ============================================================================
invalid_json           400     the body is not JSON: not UTF-8, not well-formed, nested too deeply, or a
                               number too long to read
unauthorized           401     the server has API keys and the request brought none, a malformed
                               ``Authorization`` header or an unknown key (``WWW-Authenticate: Bearer``)
insufficient_scope     403     the key is known but lacks the endpoint's scope (:mod:`.auth`)
reload_disabled        403     ``/v1/admin/reload`` on a server started without ``--enable-reload``
not_found              404     no such endpoint
method_not_allowed     405     the endpoint exists, not with this method
request_timeout        408     the headers or the body did not arrive in time (the connection is closed)
reload_running         409     a reload is already running
body_too_large         413     the body is over ``--max-body-bytes`` (refused before it is read; closed)
invalid_request        422     a field (or the ``X-Deadline-Ms`` header) is missing, unknown, of the wrong
                               type or out of range (``field`` names it; ``errors`` lists every one), or
                               the library refused a value (ValueError / TypeError)
overloaded             429     shed at once (``Retry-After`` says when to try again)
internal_error         500     a bug (its traceback goes to the server log only)
reload_failed          500     the new collection did not load; the old one is still served
not_ready              503     the collection is loading or failed to load (``Retry-After: 1``)
too_many_connections   503     the worker holds ``--max-connections`` already (closed at once)
deadline_exceeded      504     the deadline passed before the work started (in the queue, or already at
                               arrival): no work was done
=====================  ======  ============================================================================
"""
from __future__ import annotations

import json
import logging
from typing import Any, Dict, Mapping, Optional, Sequence

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException
from starlette.responses import Response

from ..wire import field_errors
from .admission import Overloaded, QueueTimeout
from .engine import NotReady
from .metrics import ServerMetrics

log = logging.getLogger("medretrieve.server")


class ApiError(Exception):
    """An error the API answers as it is: ``status``, ``type``, ``message``, the ``field`` at fault and ``extra``
    members of the error body."""

    def __init__(self, status: int, type_: str, message: str, field: Optional[str] = None,
                 headers: Optional[Dict[str, str]] = None, extra: Optional[Dict[str, Any]] = None) -> None:
        super().__init__(message)
        self.status, self.type, self.message, self.field, self.headers = status, type_, message, field, headers
        self.extra = extra


def error_response(status: int, type_: str, message: str, field: Optional[str] = None,
                   headers: Optional[Dict[str, str]] = None, extra: Optional[Dict[str, Any]] = None) -> Response:
    body: Dict[str, Any] = {"type": type_, "message": message, "field": field, **(extra or {})}
    return Response(json.dumps({"error": body}), status_code=status, media_type="application/json",
                    headers=headers)


def invalid(errors: Sequence[Mapping[str, Any]]) -> ApiError:
    """The API error of pydantic validation errors: 400 ``invalid_json`` when the body could not be read as JSON,
    else 422 ``invalid_request`` naming the first field at fault and listing every one (``errors``)."""
    unreadable = next((e for e in errors if e.get("type") == "json_invalid"), None)
    if unreadable is not None:
        return ApiError(400, "invalid_json", f"the request body is not valid JSON: {unreadable.get('msg', '')}")
    listed = field_errors(errors)
    first = listed[0] if listed else {"field": None, "message": "invalid request"}
    return ApiError(422, "invalid_request", str(first["message"]), first["field"], extra={"errors": listed})


def _api_response(exc: ApiError) -> Response:
    return error_response(exc.status, exc.type, exc.message, exc.field, exc.headers, exc.extra)


def install(app: FastAPI, metrics: ServerMetrics, endpoint_of: Any) -> None:
    """Register the handlers of the table in the module docstring on ``app``; ``endpoint_of(request)`` is the
    metrics label of a request's endpoint."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> Response:
        return _api_response(invalid(list(exc.errors())))

    @app.exception_handler(ApiError)
    async def _api(request: Request, exc: ApiError) -> Response:
        return _api_response(exc)

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
        return error_response(422, "invalid_request", str(exc) or type(exc).__name__, getattr(exc, "option", None))

    @app.exception_handler(Exception)
    async def _bug(request: Request, exc: Exception) -> Response:
        log.exception("medretrieve: internal error on %s", request.url.path)
        return error_response(500, "internal_error", f"{type(exc).__name__}: {exc}"[:500])
