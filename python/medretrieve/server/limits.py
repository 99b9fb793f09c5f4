"""What one request may cost the server before the app looks at it: the body's size and the time it takes to arrive.

:class:`RequestBody` (pure ASGI middleware) reads each request's whole body before the app runs: a body whose
``Content-Length`` is over ``max_bytes`` is refused with 413 before a byte of it is read, one that grows past it
while it streams (chunked) is refused as soon as it does (at most ``max_bytes`` plus one read, ~64 KiB, is ever
held), and one that has not fully arrived ``timeout_s`` after the request's headers is answered 408. Both close
the connection (``Connection: close``), so the rest of the body is never read. A client that goes away while
sending gets nothing. The app then receives the body in one message, so its handlers never wait on a client.

A slow client that trickles its *headers* never reaches an ASGI app; :mod:`.protocol` bounds that, and the number
of connections, for ``medretrieve serve``.
"""
from __future__ import annotations

import asyncio
import sys
from typing import Optional, Tuple

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .errors import error_response


async def _with_timeout(receive: Receive, timeout_s: float) -> Message:
    """``receive()`` bounded by ``timeout_s`` (asyncio.TimeoutError when it passes)."""
    if sys.version_info >= (3, 11):  # no task per call (asyncio.wait_for makes one before 3.12)
        async with asyncio.timeout(timeout_s):
            return await receive()
    return await asyncio.wait_for(receive(), timeout_s)


class RequestBody:
    """The ASGI middleware of the module docstring (``max_bytes``: bytes; ``timeout_s``: seconds)."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared is not None and declared > self.max_bytes:
            await self._refuse(scope, receive, send, 413, "body_too_large",
                               f"the request body is {declared} bytes; this server accepts at most {self.max_bytes}")
            return
        body, problem = await self._read(receive)
        if problem is not None:
            await self._refuse(scope, receive, send, *problem)
            return
        if body is None:  # the client went away before its body was in: nobody to answer
            return
        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if not delivered:
                delivered = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()  # later calls wait for the client to go away (streamed answers listen for it)

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive) -> Tuple[Optional[bytes], Optional[Tuple[int, str, str]]]:
        """The whole body (None when the client left), or the status, type and message of why not."""
        loop = asyncio.get_running_loop()
        give_up = loop.time() + self.timeout_s
        parts = []
        size = 0
        while True:
            try:
                message = await _with_timeout(receive, give_up - loop.time())
            except asyncio.TimeoutError:
                return None, (408, "request_timeout", f"the request body did not arrive within {self.timeout_s:g} s "
                                                      f"({size} bytes came)")
            if message["type"] == "http.disconnect":
                return None, None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None, (413, "body_too_large", f"the request body is over {self.max_bytes} bytes, the most "
                                                     "this server accepts")
            parts.append(chunk)
            if not message.get("more_body", False):
                return b"".join(parts), None

    @staticmethod
    async def _refuse(scope: Scope, receive: Receive, send: Send, status: int, kind: str, message: str) -> None:
        response = error_response(status, kind, message, headers={"Connection": "close"})
        await response(scope, receive, send)


def _content_length(scope: Scope) -> Optional[int]:
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                return int(value)
            except ValueError:
                return None  # the HTTP parser refuses these before the app runs
    return None
