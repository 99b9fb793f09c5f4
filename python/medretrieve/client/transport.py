"""How :class:`~.client.Client`'s requests travel: :class:`LeanTransport`, keep-alive HTTP/1.1 on plain
sockets with :mod:`.http11`'s request writer and ``httptools`` reply parser (the default for ``http://`` URLs), or
:class:`HttpxTransport` (``https://`` URLs, and a caller's own httpx transport: tests' mock transports, an
in-process WSGI app).

Why not httpx by default: a search cost ~0.6 ms of client CPU through ``httpx.Client`` on the 2-core bench box
(URL parsing and merging, cookie extraction, h11's event machine) and its round trip spent 1.8 ms beyond the
server's own time; ``http.client`` parses reply headers with the ``email`` package. The lean transport writes a
request in one ``send`` and reads a whole search reply with one ``poll`` and one ``recv_into`` (bench/RESULTS.md,
"Serving"). Both transports answer with the same surface (``status_code``, ``headers.get``, ``content``,
``is_success``, ``iter_lines``, ``read``, ``close``): an ``httpx.Response``, or a :class:`Reply`.

A :class:`LeanTransport` attempt has one deadline, ``timeout_s`` from its start: connecting, sending and every
receive share it, so a server trickling its reply cannot stretch the wait; a streamed reply (server-sent events)
instead gives each read of its body ``timeout_s``, as an answer may be written for longer.
"""
from __future__ import annotations

import math
import select
import socket
import threading
import time
from typing import Dict, Iterator, List, Optional, Tuple, Type

import httpx

from .http11 import (JSON_HEADERS, LineSplitter, PooledReply, ReplyError, ReplyReader, RequestHead,
                     StaleConnection)

# the failures of an attempt that leave no response: refused connections are retried (the server may be starting)
REFUSED: Tuple[Type[BaseException], ...] = (httpx.ConnectError, ConnectionRefusedError)
TIMED_OUT: Tuple[Type[BaseException], ...] = (httpx.TimeoutException, socket.timeout)
TRANSPORT_ERRORS: Tuple[Type[BaseException], ...] = (httpx.TransportError, OSError, ReplyError)

_RECEIVE_BYTES = 256 * 1024  # one receive's most bytes: a 10-hit search reply (~9 kB) arrives in one


class _Connection:
    """One keep-alive connection: a non-blocking socket, its poller and a receive buffer. Each wait is bounded by
    the seconds its caller has left."""

    def __init__(self, head: RequestHead, give_up: float) -> None:
        self.sock = socket.create_connection((head.host, head.port), timeout=max(give_up - time.monotonic(), 0.001))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # a request leaves in one segment
        self.sock.setblocking(False)
        self._poller = select.poll()
        self._poller.register(self.sock, select.POLLIN)
        self._buffer = memoryview(bytearray(_RECEIVE_BYTES))
        self.received = 0  # bytes received for the current reply

    def send(self, data: bytes, give_up: float) -> None:
        """All of ``data`` by ``give_up`` (``time.monotonic()`` s)."""
        self.received = 0
        view = memoryview(data)
        while view:
            try:
                view = view[self.sock.send(view):]
            except BlockingIOError:  # the socket's buffer is full (a large batch): wait until it drains
                out = select.poll()
                out.register(self.sock, select.POLLOUT)
                self._wait(out, give_up - time.monotonic())

    def receive(self, reader: ReplyReader, left_s: float) -> None:
        """Wait at most ``left_s`` seconds for the next bytes of the reply and feed them to ``reader`` (EOF
        included)."""
        self._wait(self._poller, left_s)
        try:
            n = self.sock.recv_into(self._buffer)
        except BlockingIOError:  # woken without data: wait again
            return
        self.received += n
        if n:
            reader.feed(self._buffer[:n])
        elif self.received == 0:
            raise ConnectionResetError("the server closed the connection without replying")
        else:
            reader.feed_eof()

    @staticmethod
    def _wait(poller: "select.poll", left_s: float) -> None:
        if left_s <= 0 or not poller.poll(math.ceil(left_s * 1000.0)):
            raise socket.timeout("the attempt's time is up")

    def idle_and_open(self) -> bool:
        """Whether the server has left this idle connection open (it has not closed it nor sent anything)."""
        return not self._poller.poll(0)

    def close(self) -> None:
        self.sock.close()


class Reply(PooledReply[_Connection]):
    """One response of a :class:`LeanTransport`. A streamed reply holds its connection until read to the end
    (then it goes back to the pool) or closed (then it is closed: the server sees the client go)."""

    def read(self) -> bytes:
        """The rest of the body (the connection then goes back to the pool)."""
        pieces = [self.content, *self._chunks()]
        self.content = b"".join(pieces)
        return self.content

    def iter_lines(self) -> Iterator[str]:
        """The body's lines as they arrive (without their line ends)."""
        lines = LineSplitter()
        for chunk in self._chunks():
            yield from lines.feed(chunk)
        yield from lines.end()

    def _chunks(self) -> Iterator[bytes]:
        while self._conn is not None:
            piece = self._reader.take()
            if piece:
                yield piece
            if self._reader.done:
                self._release()
                return
            try:
                self._conn.receive(self._reader, self._per_wait_s)
            except BaseException:
                self.close()
                raise

    def close(self) -> None:
        """Drop what is left of the body: the connection is closed unless the body was read to its end."""
        self._release()


class LeanTransport:
    """Keep-alive connections to one ``http://`` server, reused last-in first-out by any thread (a thread takes
    an idle one or opens its own; at most ``max_idle`` are kept). ``headers``: sent with every request."""

    def __init__(self, url: str, headers: Optional[Dict[str, str]] = None, max_idle: int = 8) -> None:
        self.head = RequestHead(url, headers)
        self.max_idle = max_idle
        self._idle: List[_Connection] = []
        self._lock = threading.Lock()

    def send(self, method: str, path: str, body: Optional[bytes], timeout_s: float,
             stream: bool = False) -> Reply:
        """One request and its response (read whole unless ``stream``), all within ``timeout_s`` (s; a stream:
        each read of its body within it). Raises OSError (ConnectionRefusedError, socket.timeout) or
        ReplyError."""
        give_up = time.monotonic() + timeout_s
        data = self.head.request(method, path, body)
        conn = self._idle_connection()
        if conn is not None:
            try:
                return self._exchange(conn, data, give_up, timeout_s, stream, reused=True)
            except StaleConnection:
                pass  # the server closed this idle connection as we sent: once more on a new one
        return self._exchange(_Connection(self.head, give_up), data, give_up, timeout_s, stream, reused=False)

    def _exchange(self, conn: _Connection, data: bytes, give_up: float, timeout_s: float, stream: bool,
                  reused: bool) -> Reply:
        reader = ReplyReader()
        try:
            try:
                conn.send(data, give_up)
                while not reader.head_done:
                    conn.receive(reader, give_up - time.monotonic())
            except (ConnectionResetError, BrokenPipeError) as exc:
                if reused and conn.received == 0:
                    raise StaleConnection() from exc
                raise
            if stream:
                return Reply(reader, conn, self, timeout_s)
            while not reader.done:
                conn.receive(reader, give_up - time.monotonic())
        except BaseException:
            conn.close()
            raise
        self.put(conn, reader.reusable)
        return Reply(reader, None, self, timeout_s)

    def _idle_connection(self) -> Optional[_Connection]:
        """The most recently used idle connection the server has not closed."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                conn = self._idle.pop()
            if conn.idle_and_open():
                return conn
            conn.close()

    def put(self, conn: _Connection, reusable: bool) -> None:
        """Take back a connection whose response is done with (closed unless ``reusable`` and there is room)."""
        if reusable:
            with self._lock:
                if len(self._idle) < self.max_idle:
                    self._idle.append(conn)
                    return
        conn.close()

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class HttpxTransport:
    """The same ``send`` over an ``httpx.Client`` (``https://`` URLs; ``transport``: a caller's httpx transport)."""

    def __init__(self, url: str, headers: Optional[Dict[str, str]] = None,
                 transport: Optional[httpx.BaseTransport] = None) -> None:
        self._http = httpx.Client(base_url=url, headers=headers, transport=transport)

    def send(self, method: str, path: str, body: Optional[bytes], timeout_s: float,
             stream: bool = False) -> httpx.Response:
        request = self._http.build_request(method, path, content=body, headers=JSON_HEADERS if body is not None else None,
                                           timeout=timeout_s)
        return self._http.send(request, stream=stream)

    def close(self) -> None:
        self._http.close()
