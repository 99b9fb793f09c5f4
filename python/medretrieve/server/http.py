"""HTTP plumbing shared by the app and its routes: request deadlines, JSON responses, the metrics middleware."""
from __future__ import annotations

import time
from typing import Any, Callable, Coroutine, Dict, Optional, Type, TypeVar, Union

import orjson
from fastapi import Request
from fastapi.routing import APIRoute
from pydantic import BaseModel, ValidationError
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from ..outbound import Deadline
from ..wire import DEADLINE_HEADER, deadline_header_ms
from .errors import ApiError, invalid
from .metrics import ServerMetrics

M = TypeVar("M", bound=BaseModel)
ENDPOINTS = ("/v1/search", "/v1/search:batch", "/v1/answer", "/v1/collection", "/v1/admin/reload", "/healthz",
             "/readyz", "/metrics")


class RawRoute(APIRoute):
    """A route whose endpoint takes the ``Request`` and returns a ``Response`` itself: it reads and validates its
    own body (:func:`read_body`) and serialises its own answer, so FastAPI's per-request dependency solving,
    validation and serialisation (~0.1 ms of CPU a request) are skipped. ``get_route_handler`` is FastAPI's
    documented hook for custom route classes; the OpenAPI document still comes from the route's arguments."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        return self.endpoint


def endpoint_of(request: Union[Request, Scope]) -> str:
    """The metrics label of a request: its endpoint, or ``other`` (unknown paths must not grow the label set)."""
    path = request.url.path if isinstance(request, Request) else request.get("path", "")
    return path if path in ENDPOINTS else "other"


class Observe:
    """Pure ASGI middleware: stamps each request's arrival unless the server did at its first byte (the deadline
    starts there: :mod:`.protocol`) and counts every answer (status and latency per endpoint), errors included."""

    def __init__(self, app: ASGIApp, metrics: ServerMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        arrived = scope.setdefault("state", {}).setdefault("arrived", time.perf_counter())
        status = {"code": 500}

        async def send_and_note(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_and_note)
        finally:
            endpoint = endpoint_of(scope)
            self.metrics.child(self.metrics.requests, endpoint, str(status["code"])).inc()
            self.metrics.child(self.metrics.latency, endpoint).observe(time.perf_counter() - arrived)


def request_deadline(request: Request, body_ms: Optional[float], default_ms: float) -> Deadline:
    """The request's deadline, started at its arrival: the smaller of the body's ``deadline_ms`` and the
    ``X-Deadline-Ms`` header, else ``default_ms``."""
    budgets = [b for b in (body_ms, _header_ms(request)) if b is not None]
    deadline = Deadline(min(budgets) if budgets else default_ms)
    deadline.start = request.scope.get("state", {}).get("arrived", deadline.start)
    return deadline


def _header_ms(request: Request) -> Optional[float]:
    """The ``X-Deadline-Ms`` header, checked by the body field's own rule (same limits, same error)."""
    raw = request.headers.get(DEADLINE_HEADER)
    if raw is None:
        return None
    try:
        return deadline_header_ms(raw)
    except ValidationError as exc:
        raise invalid([{**e, "loc": (DEADLINE_HEADER,)} for e in exc.errors()]) from None


async def read_body(request: Request, model: Type[M]) -> M:
    """The request's body as ``model``, parsed and validated in one pass (pydantic's JSON parser: invalid UTF-8,
    deep nesting and over-long numbers are invalid JSON like any other, never a RecursionError or a 500). Raises
    the :func:`.errors.invalid` ApiError."""
    raw = await request.body()
    if not raw.strip():
        raise ApiError(422, "invalid_request", "a JSON request body is required")
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise invalid(exc.errors()) from None


def json_bytes(payload: Any) -> bytes:
    """``payload`` as UTF-8 JSON, with orjson: a search response (10 hits, their stages and scores, ~11 KB) takes
    ~8 us where ``json.dumps`` took ~160 us, a third of the app's own CPU per request. NaN and infinities, which
    JSON cannot carry, become null; numpy scalars and arrays are written as numbers and lists."""
    return orjson.dumps(payload, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS)


def json_response(payload: Any, status: int = 200, headers: Optional[Dict[str, str]] = None) -> Response:
    return Response(json_bytes(payload), status_code=status, media_type="application/json", headers=headers)
