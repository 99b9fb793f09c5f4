"""The HTTP/1.1 protocol ``medretrieve serve`` runs uvicorn with: uvicorn's httptools protocol plus what uvicorn
has no setting for.

- A deadline for each request's headers: from the connection's start (its first request) or the request's first
  byte (a later one on a kept-alive connection; the idle time between them is uvicorn's ``timeout_keep_alive``),
  ``header_timeout_s``. A client that has not sent every header by then is answered 408 and disconnected, so
  connections that trickle their headers (or send nothing at all) cannot pile up.
- A cap on open connections: the connection over ``max_connections`` is answered 503 (``Retry-After: 1``) and
  closed at once, before anything of it is read. (uvicorn's ``limit_concurrency`` answers in plain text after
  reading the headers, which a trickling client may never finish.)
- At shutdown, a request whose body is still arriving is dropped at once instead of being waited for (no work
  has started on it), so slow clients do not hold SIGTERM for the graceful timeout.
- Each request's arrival is stamped at its first byte (``scope["state"]["arrived"]``, ``time.perf_counter()``
  s), so its deadline and its ``Server-Timing`` total count the server's whole time: parsing, waiting for the
  event loop and the framework's layers before the app (~0.05 ms on a warm CPU, 0.3 ms after an idle spell on the
  bench box). Elsewhere (an app mounted in another server) :class:`.http.Observe` stamps it as the app is called.

The body's own size and time limits are :mod:`.limits`' (an ASGI middleware, so they hold wherever the app runs).
Settings come from the worker's :class:`~.config.ServerConfig` (the ``MEDRETRIEVE_SERVE_CONFIG`` environment),
read once per process.
"""
from __future__ import annotations

import asyncio
import functools
import json
import os
import time
from typing import Any, Optional

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from .config import CONFIG_ENV, ServerConfig


@functools.lru_cache(maxsize=1)
def _settings() -> ServerConfig:
    text = os.environ.get(CONFIG_ENV)
    return ServerConfig.from_json(text) if text else ServerConfig("")


def _raw_error(status: int, reason: str, kind: str, message: str, extra_headers: str = "") -> bytes:
    """A whole HTTP/1.1 error response in the API's JSON error shape, closing the connection."""
    body = json.dumps({"error": {"type": kind, "message": message, "field": None}}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            f"{extra_headers}connection: close\r\n\r\n")
    return head.encode("ascii") + body


class GuardedHttpToolsProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with the header deadline, the connection cap and the shutdown rule of the
    module docstring."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = _settings()
        self.header_timeout_s = settings.header_timeout_s
        self.max_connections = settings.max_connections
        self.header_timer: Optional[asyncio.TimerHandle] = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.max_connections:
            transport.write(_raw_error(503, "Service Unavailable", "too_many_connections",
                                       f"this server holds {self.max_connections} connections already; retry later",
                                       "retry-after: 1\r\n"))
            transport.close()
            return
        self._arm_header_timer()

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope["state"]["arrived"] = time.perf_counter()
        if self.header_timer is None:  # a later request on a kept-alive connection: its headers start now
            self._arm_header_timer()

    def on_headers_complete(self) -> None:
        self._cancel_header_timer()
        super().on_headers_complete()

    def connection_lost(self, exc: Optional[Exception]) -> None:
        self._cancel_header_timer()
        super().connection_lost(exc)

    def shutdown(self) -> None:
        cycle = self.cycle
        if cycle is not None and not cycle.response_complete and cycle.more_body and not cycle.response_started:
            self.transport.close()  # its body is still arriving: nothing was done for it yet
            return
        super().shutdown()

    def _arm_header_timer(self) -> None:
        self.header_timer = self.loop.call_later(self.header_timeout_s, self._headers_too_slow)

    def _cancel_header_timer(self) -> None:
        if self.header_timer is not None:
            self.header_timer.cancel()
            self.header_timer = None

    def _headers_too_slow(self) -> None:
        self.header_timer = None
        if not self.transport.is_closing():
            self.transport.write(_raw_error(408, "Request Timeout", "request_timeout",
                                            f"the request headers did not arrive within {self.header_timeout_s:g} s"))
            self.transport.close()
