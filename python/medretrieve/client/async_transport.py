"""How :class:`~.client.AsyncClient`'s requests travel: :class:`AsyncLeanTransport`, keep-alive HTTP/1.1 on
asyncio streams with :mod:`.http11`'s request writer and reply parser (the default for ``http://`` URLs), or
:class:`AsyncHttpxTransport` (``https://`` URLs, and a caller's own httpx transport). The asyncio twins of
:mod:`.transport`'s, with the same surface and the same deadlines: an attempt's connecting, sending and receiving
share ``timeout_s``; a streamed reply gives each read of its body ``timeout_s``.

Connections belong to the event loop that opened them: a client used from another loop (a second
``asyncio.run``) opens new ones.
"""
from __future__ import annotations

import asyncio
import socket
import sys
from typing import Any, AsyncIterator, Coroutine, Dict, List, Optional, TypeVar

import httpx

from .http11 import JSON_HEADERS, LineSplitter, PooledReply, ReplyReader, RequestHead, StaleConnection

_RECEIVE_BYTES = 256 * 1024  # one read's most bytes: a 10-hit search reply (~9 kB) arrives in one
_T = TypeVar("_T")


async def _within(step: Coroutine[Any, Any, _T], left_s: float) -> _T:
    """``step`` within ``left_s`` seconds: socket.timeout (a TimeoutError) when it takes longer. On Python 3.11+
    with ``asyncio.timeout`` (a timer on the running task), before that with ``wait_for`` (a task per step)."""
    if left_s <= 0:
        step.close()  # never started
        raise socket.timeout("the attempt's time is up")
    try:
        if sys.version_info >= (3, 11):
            async with asyncio.timeout(left_s):
                return await step
        return await asyncio.wait_for(step, left_s)
    except asyncio.TimeoutError:
        raise socket.timeout("the attempt's time is up") from None


async def _connected(host: str, port: int) -> socket.socket:
    """A non-blocking TCP socket connected to ``host:port`` (each of its addresses in turn)."""
    loop = asyncio.get_running_loop()
    failure: Optional[OSError] = None
    for family, kind, proto, _, address in await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM):
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.sock_connect(sock, address)
            return sock
        except OSError as exc:
            sock.close()
            failure = exc
        except BaseException:
            sock.close()
            raise
    raise failure or OSError(f"no address for {host}:{port}")


class _AsyncConnection:
    """One keep-alive connection on asyncio streams over a socket of its own (``TCP_NODELAY``: a request leaves in
    one segment), so that it can be closed even after its event loop is (a client outliving an ``asyncio.run``)."""

    def __init__(self, sock: socket.socket, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.sock = sock
        self.reader = reader
        self.writer = writer
        self.loop = asyncio.get_running_loop()
        self.received = 0  # bytes received for the current reply

    @classmethod
    async def open(cls, head: RequestHead, left_s: float) -> "_AsyncConnection":
        sock = await _within(_connected(head.host, head.port), left_s)
        try:
            reader, writer = await asyncio.open_connection(sock=sock, limit=_RECEIVE_BYTES)
        except BaseException:
            sock.close()
            raise
        return cls(sock, reader, writer)

    async def send(self, data: bytes, left_s: float) -> None:
        self.received = 0
        self.writer.write(data)
        await _within(self.writer.drain(), left_s)

    async def receive(self, reply: ReplyReader, left_s: float) -> None:
        """Wait for the next bytes of the reply and feed them to ``reply`` (EOF included)."""
        data = await _within(self.reader.read(_RECEIVE_BYTES), left_s)
        self.received += len(data)
        if data:
            reply.feed(data)
        elif self.received == 0:
            raise ConnectionResetError("the server closed the connection without replying")
        else:
            reply.feed_eof()

    def idle_and_open(self) -> bool:
        """Whether this idle connection can carry a request: same loop, and the server has not closed it."""
        return (self.loop is asyncio.get_running_loop() and not self.reader.at_eof()
                and not self.writer.is_closing())

    def close(self) -> None:
        if self.loop.is_closed():
            self.sock.close()  # its transport cannot run any more
        else:
            self.writer.close()  # the loop closes the socket; nothing to wait for


class AsyncReply(PooledReply[_AsyncConnection]):
    """One response of an :class:`AsyncLeanTransport` (with ``httpx.Response``'s async methods: ``aread``,
    ``aiter_lines``, ``aclose``). A streamed reply holds its connection until read to the end or closed."""

    async def aread(self) -> bytes:
        """The rest of the body (the connection then goes back to the pool)."""
        pieces = [self.content]
        async for chunk in self._chunks():
            pieces.append(chunk)
        self.content = b"".join(pieces)
        return self.content

    async def aiter_lines(self) -> AsyncIterator[str]:
        """The body's lines as they arrive (without their line ends)."""
        lines = LineSplitter()
        async for chunk in self._chunks():
            for line in lines.feed(chunk):
                yield line
        for line in lines.end():
            yield line

    async def _chunks(self) -> AsyncIterator[bytes]:
        while self._conn is not None:
            piece = self._reader.take()
            if piece:
                yield piece
            if self._reader.done:
                self._release()
                return
            try:
                await self._conn.receive(self._reader, self._per_wait_s)
            except BaseException:
                await self.aclose()
                raise

    async def aclose(self) -> None:
        """Drop what is left of the body: the connection is closed unless the body was read to its end."""
        self._release()


class AsyncLeanTransport:
    """Keep-alive connections to one ``http://`` server, reused last-in first-out by the client's tasks (a task
    takes an idle one or opens its own; at most ``max_idle`` are kept). ``headers``: sent with every request."""

    def __init__(self, url: str, headers: Optional[Dict[str, str]] = None, max_idle: int = 8) -> None:
        self.head = RequestHead(url, headers)
        self.max_idle = max_idle
        self._idle: List[_AsyncConnection] = []

    async def send(self, method: str, path: str, body: Optional[bytes], timeout_s: float,
                   stream: bool = False) -> AsyncReply:
        """One request and its response (read whole unless ``stream``), all within ``timeout_s`` (s; a stream:
        each read of its body within it). Raises OSError (ConnectionRefusedError, socket.timeout) or
        ReplyError."""
        give_up = asyncio.get_running_loop().time() + timeout_s
        data = self.head.request(method, path, body)
        conn = self._idle_connection()
        if conn is not None:
            try:
                return await self._exchange(conn, data, give_up, timeout_s, stream, reused=True)
            except StaleConnection:
                pass  # the server closed this idle connection as we sent: once more on a new one
        conn = await _AsyncConnection.open(self.head, give_up - asyncio.get_running_loop().time())
        return await self._exchange(conn, data, give_up, timeout_s, stream, reused=False)

    async def _exchange(self, conn: _AsyncConnection, data: bytes, give_up: float, timeout_s: float, stream: bool,
                        reused: bool) -> AsyncReply:
        reader = ReplyReader()
        left = lambda: give_up - conn.loop.time()  # noqa: E731
        try:
            try:
                await conn.send(data, left())
                while not reader.head_done:
                    await conn.receive(reader, left())
            except (ConnectionResetError, BrokenPipeError) as exc:
                if reused and conn.received == 0:
                    raise StaleConnection() from exc
                raise
            if stream:
                return AsyncReply(reader, conn, self, timeout_s)
            while not reader.done:
                await conn.receive(reader, left())
        except BaseException:  # a failure or a cancelled task: the reply is half read
            conn.close()
            raise
        self.put(conn, reader.reusable)
        return AsyncReply(reader, None, self, timeout_s)

    def _idle_connection(self) -> Optional[_AsyncConnection]:
        while self._idle:
            conn = self._idle.pop()
            if conn.idle_and_open():
                return conn
            conn.close()
        return None

    def put(self, conn: _AsyncConnection, reusable: bool) -> None:
        """Take back a connection whose response is done with (closed unless ``reusable`` and there is room)."""
        if reusable and len(self._idle) < self.max_idle:
            self._idle.append(conn)
        else:
            conn.close()

    async def aclose(self) -> None:
        idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class AsyncHttpxTransport:
    """The same ``send`` over an ``httpx.AsyncClient`` (``https://`` URLs; ``transport``: a caller's httpx
    transport)."""

    def __init__(self, url: str, headers: Optional[Dict[str, str]] = None,
                 transport: Optional[httpx.AsyncBaseTransport] = None) -> None:
        self._http = httpx.AsyncClient(base_url=url, headers=headers, transport=transport)

    async def send(self, method: str, path: str, body: Optional[bytes], timeout_s: float,
                   stream: bool = False) -> httpx.Response:
        request = self._http.build_request(method, path, content=body, headers=JSON_HEADERS if body is not None else None,
                                           timeout=timeout_s)
        return await self._http.send(request, stream=stream)

    async def aclose(self) -> None:
        await self._http.aclose()
