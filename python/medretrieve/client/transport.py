"""How :class:`~.client.Client`'s requests travel: :class:`LeanTransport`, keep-alive HTTP/1.1 on the standard
library's ``http.client`` (the default for ``http://`` URLs), or :class:`HttpxTransport` (``https://`` URLs, and a
caller's own httpx transport: tests' mock transports, an in-process WSGI app).

Why not httpx by default: a search cost ~0.6 ms of client CPU through ``httpx.Client`` on the 2-core bench box
(URL parsing and merging, cookie extraction, h11's event machine), against ~0.2 ms through ``http.client``, and its
round trip spent 1.8 ms beyond the server's own time where ``http.client``'s spent 1.0 ms (bench/RESULTS.md,
"Serving"). Both transports answer with the same surface (``status_code``, ``headers.get``, ``content``,
``is_success``, ``iter_lines``, ``read``, ``close``): an ``httpx.Response``, or a :class:`Reply`.

A :class:`LeanTransport` attempt has one deadline, ``timeout_s`` from its start: connecting, sending and every
receive share it (:class:`_DeadlineSocket`), so a server trickling its reply cannot stretch the wait; a streamed
reply (server-sent events) instead gives each read ``timeout_s``, as an answer may be written for longer.
"""
from __future__ import annotations

import http.client
import select
import socket
import threading
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple, Type
from urllib.parse import urlsplit

import httpx

# the failures of an attempt that leave no response: refused connections are retried (the server may be starting)
REFUSED: Tuple[Type[BaseException], ...] = (httpx.ConnectError, ConnectionRefusedError)
TIMED_OUT: Tuple[Type[BaseException], ...] = (httpx.TimeoutException, socket.timeout)
TRANSPORT_ERRORS: Tuple[Type[BaseException], ...] = (httpx.TransportError, OSError, http.client.HTTPException)

_JSON = {"Content-Type": "application/json"}
# the largest reply body read (bytes): a batch of 100-hit explained results is a few MB; a server that sends more
# is refused rather than held in memory
MAX_REPLY_BYTES = 64 * 2**20


class _DeadlineSocket(socket.socket):
    """A socket whose every send and receive waits at most until ``give_up`` (``time.monotonic()`` s): a socket
    timeout alone bounds each wait, not their sum. ``per_wait_s``: when set, each wait gets that long instead
    (streams)."""

    give_up = float("inf")
    per_wait_s: Optional[float] = None

    def _arm(self) -> None:
        if self.per_wait_s is not None:
            self.settimeout(self.per_wait_s)
            return
        left = self.give_up - time.monotonic()
        if left <= 0:
            raise socket.timeout("the attempt's time is up")
        self.settimeout(left)

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0) -> int:
        self._arm()
        return super().recv_into(buffer, nbytes, flags)

    def sendall(self, data: Any, flags: int = 0) -> None:
        self._arm()
        super().sendall(data, flags)


class _Connection(http.client.HTTPConnection):
    """An ``http.client`` connection over a :class:`_DeadlineSocket` (``http.client`` sets TCP_NODELAY and sends a
    bytes body with its headers in one write, so no Nagle / delayed-ACK stall)."""

    sock: Optional[_DeadlineSocket]

    def connect(self) -> None:
        super().connect()
        plain = self.sock
        assert plain is not None
        self.sock = _DeadlineSocket(plain.family, plain.type, plain.proto, fileno=plain.detach())


class Reply:
    """One response of a :class:`LeanTransport` (the surface of ``httpx.Response`` the client uses). A streamed
    reply holds its connection until read to the end (then it goes back to the pool) or closed (then it is
    closed: the server sees the client go)."""

    def __init__(self, response: http.client.HTTPResponse, conn: _Connection, pool: "LeanTransport",
                 stream: bool) -> None:
        self.status_code = response.status
        self.headers = response.msg  # case-insensitive get()
        self._response = response
        self._conn: Optional[_Connection] = conn
        self._pool = pool
        self.content = b""
        if not stream:
            self.read()

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def read(self) -> bytes:
        """The rest of the body (the connection then goes back to the pool). HTTPException when it is over
        :data:`MAX_REPLY_BYTES` (the connection is then closed)."""
        if self._conn is not None:
            declared = self._response.length
            if declared is not None and declared > MAX_REPLY_BYTES:
                self.close()
                raise http.client.HTTPException(f"the reply's body is {declared} bytes, over the client's "
                                                f"limit of {MAX_REPLY_BYTES}")
            self.content = self._response.read(MAX_REPLY_BYTES + 1)
            if len(self.content) > MAX_REPLY_BYTES:
                self.close()
                raise http.client.HTTPException(f"the reply's body is over the client's limit of "
                                                f"{MAX_REPLY_BYTES} bytes")
            self._release(reusable=True)
        return self.content

    def iter_lines(self) -> Iterator[str]:
        """The body's lines as they arrive (without their line ends)."""
        while self._conn is not None:
            line = self._response.readline()
            if not line:
                self._release(reusable=True)
                return
            yield line.decode("utf-8").rstrip("\r\n")

    def close(self) -> None:
        """Drop what is left of the body: the connection is closed unless the body was read to its end."""
        self._release(reusable=False)

    def _release(self, reusable: bool) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.put(conn, reusable and self._response.isclosed() and not self._response.will_close)


class LeanTransport:
    """Keep-alive ``http.client`` connections to one ``http://`` server, reused last-in first-out by any thread
    (a thread takes an idle one or opens its own; at most ``max_idle`` are kept). ``headers``: sent with every
    request."""

    def __init__(self, url: str, headers: Optional[Dict[str, str]] = None, max_idle: int = 8) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"LeanTransport speaks plain http://host[:port], got {url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.headers = dict(headers or {})
        self.max_idle = max_idle
        self._idle: List[_Connection] = []
        self._lock = threading.Lock()

    def send(self, method: str, path: str, body: Optional[bytes], timeout_s: float,
             stream: bool = False) -> Reply:
        """One request and its response (read whole unless ``stream``), all within ``timeout_s`` (s; a stream:
        each read within it). Raises OSError (ConnectionRefusedError, socket.timeout) or HTTPException."""
        give_up = time.monotonic() + timeout_s
        headers = {**_JSON, **self.headers} if body is not None else self.headers
        conn = self._idle_connection()
        if conn is not None:
            try:
                return self._exchange(conn, method, path, body, headers, give_up, timeout_s, stream)
            except (ConnectionResetError, BrokenPipeError, http.client.RemoteDisconnected):
                conn.close()  # the server closed this idle connection as we sent: once more on a new one
        conn = _Connection(self.host, self.port, timeout=max(give_up - time.monotonic(), 0.001))
        return self._exchange(conn, method, path, body, headers, give_up, timeout_s, stream)

    def _exchange(self, conn: _Connection, method: str, path: str, body: Optional[bytes], headers: Dict[str, str],
                  give_up: float, timeout_s: float, stream: bool) -> Reply:
        try:
            if conn.sock is None:
                conn.connect()
            sock = conn.sock  # kept: a response with "Connection: close" detaches it from conn, not from its reader
            assert sock is not None
            sock.give_up, sock.per_wait_s = give_up, None
            conn.request(method, self.prefix + path, body=body, headers=headers)
            response = conn.getresponse()
            if stream:
                sock.per_wait_s = timeout_s
            return Reply(response, conn, self, stream)
        except BaseException:
            conn.close()
            raise

    def _idle_connection(self) -> Optional[_Connection]:
        """The most recently used idle connection the server has not closed (a readable idle socket: it did)."""
        while True:
            with self._lock:
                if not self._idle:
                    return None
                conn = self._idle.pop()
            sock = conn.sock
            if sock is not None and not select.select([sock], [], [], 0)[0]:
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
        request = self._http.build_request(method, path, content=body, headers=_JSON if body is not None else None,
                                           timeout=timeout_s)
        return self._http.send(request, stream=stream)

    def close(self) -> None:
        self._http.close()
