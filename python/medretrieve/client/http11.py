"""HTTP/1.1 on the wire, without I/O: the bytes of a request (:class:`RequestHead`) and a reply read from whatever
bytes arrive (:class:`ReplyReader`, over ``httptools``, the C parser uvicorn reads requests with). The sync
(:mod:`.transport`) and async (:mod:`.async_transport`) transports do the I/O around them.

Why not ``http.client``: its reply headers go through the ``email`` package's parser, the largest item of a search's
client CPU, and each reply needs a buffered file over the socket; here a reply costs one ``recv_into`` and one
``feed_data`` when it arrives whole (bench/RESULTS.md, "Serving").
"""
from __future__ import annotations

import re
from typing import Dict, Generic, List, Optional, Protocol, TypeVar
from urllib.parse import urlsplit

import httptools

# the reply caps of the package's outbound policy (bytes; header lines), read from these names at each reply: a
# larger body is refused rather than held in memory; a head without end (one endless header value, endless
# headers) is refused at its cap instead of growing until the timeout (the parser concatenates a value's pieces)
from ..outbound import MAX_HEAD_BYTES, MAX_HEADERS, MAX_REPLY_BYTES
JSON_HEADERS = {"Content-Type": "application/json"}  # of a request with a body (an httpx transport's too)
_TOKEN = re.compile(r"^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")  # an HTTP header name (RFC 9110 token)


class ReplyError(Exception):
    """The server's reply is not HTTP/1.1 the client can read, or it is over :data:`MAX_HEAD_BYTES`,
    :data:`MAX_HEADERS` or :data:`MAX_REPLY_BYTES` (a subclass, :class:`ReplyCut`: it was cut short)."""


class ReplyCut(ReplyError):
    """The server closed the connection in the middle of its reply (a server killed, a proxy's cut)."""


class StaleConnection(Exception):
    """A reused idle connection turned out closed by the server before it read the request (nothing came back):
    a transport sends the request once more on a new connection."""


class _NextMessage(Exception):
    """Raised in the parser's callback when bytes after a complete reply begin another one."""


class Headers(Dict[str, str]):
    """A reply's headers by lower-case name (a repeated header's values joined with ``", "``); ``get`` takes any
    case."""

    def get(self, name: str, default: Optional[str] = None) -> Optional[str]:  # type: ignore[override]
        return super().get(name.lower(), default)


class RequestHead:
    """What every request to one server starts with. ``url``: ``http://host[:port][/prefix]``; ``headers``: sent
    with every request (ValueError for a name that is not a token or a value with a line break: header
    injection)."""

    def __init__(self, url: str, headers: Optional[Dict[str, str]] = None) -> None:
        parts = urlsplit(url)
        if parts.scheme != "http" or not parts.hostname:
            raise ValueError(f"the lean transport speaks plain http://host[:port], got {url!r}")
        self.host = parts.hostname
        self.port = parts.port or 80
        self.prefix = parts.path.rstrip("/")
        named = f"[{self.host}]" if ":" in self.host else self.host
        lines = [f"Host: {named}" + (f":{parts.port}" if parts.port else "")]
        for name, value in (headers or {}).items():
            if not _TOKEN.match(name) or any(c in str(value) for c in "\r\n\0"):
                raise ValueError(f"invalid header {name!r}: {value!r}")
            lines.append(f"{name}: {value}")
        self._fixed = "\r\n".join(lines) + "\r\n"

    def request(self, method: str, path: str, body: Optional[bytes]) -> bytes:
        """The whole request, head and body in one piece (so it leaves in one write)."""
        if body is None:
            return f"{method} {self.prefix}{path} HTTP/1.1\r\n{self._fixed}\r\n".encode("latin-1")
        return (f"{method} {self.prefix}{path} HTTP/1.1\r\n{self._fixed}Content-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode("latin-1") + body


class ReplyReader:
    """One reply, fed the bytes as they arrive (:meth:`feed`; :meth:`feed_eof` when the server closes). ``status``
    and ``headers`` once ``head_done``; body pieces collect in ``pieces`` (a stream's reader takes them as they
    come: :meth:`take`); ``done`` once the reply is complete; ``reusable`` then says whether its connection can
    carry the next request. Interim replies (``100 Continue``, ``103 Early Hints``) are skipped, as HTTP asks of
    a client that did not ask for them: the reply read is the final one."""

    def __init__(self) -> None:
        self._parser = httptools.HttpResponseParser(self)
        self.status = 0
        self.headers = Headers()
        self.head_done = False
        self.done = False
        self.pieces: List[bytes] = []
        self._received = 0  # body bytes so far
        self._leftover = False  # bytes after the reply's end (no pipelining here: the connection is not reused)
        self._until_close = False  # no length and not chunked: the body ends when the connection does
        self._keep_alive = False  # read with the head: llhttp forgets it once the reply is complete
        self._head_room = MAX_HEAD_BYTES  # head bytes the server may still send before the final head is done
        self._interim = False  # the head just read is a 1xx's: its message is skipped
        self._header_lines = 0  # in the head being read

    # httptools' callbacks
    def on_message_begin(self) -> None:
        if self.done:  # bytes after the reply began another: stop parsing there
            raise _NextMessage()

    def on_header(self, name: bytes, value: bytes) -> None:
        self._header_lines += 1  # lines, not names: a repeated name is joined into one value
        if self._header_lines > MAX_HEADERS:
            raise ReplyError(f"the reply's head has more than the client's limit of {MAX_HEADERS} headers")
        key = name.decode("latin-1").lower()
        text = value.decode("latin-1")
        self.headers[key] = f"{self.headers[key]}, {text}" if key in self.headers else text

    def on_headers_complete(self) -> None:
        self.status = self._parser.get_status_code()
        if 100 <= self.status < 200 and self.status != 101:  # interim (101 is an upgrade: refused by feed)
            self._interim = True
            self.headers = Headers()
            self._header_lines = 0
            return
        declared = self.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > MAX_REPLY_BYTES:
            raise ReplyError(f"the reply's body is {declared} bytes, over the client's limit of {MAX_REPLY_BYTES}")
        self._until_close = (declared is None and "chunked" not in (self.headers.get("transfer-encoding") or "")
                             and self.status >= 200 and self.status not in (204, 304))
        self._keep_alive = self._parser.should_keep_alive() and not self._until_close
        self.head_done = True

    def on_body(self, body: bytes) -> None:
        self._received += len(body)
        if self._received > MAX_REPLY_BYTES:
            raise ReplyError(f"the reply's body is over the client's limit of {MAX_REPLY_BYTES} bytes")
        self.pieces.append(body)

    def on_message_complete(self) -> None:
        if self._interim:  # the final reply follows on the same connection
            self._interim = False
            return
        self.done = True

    # fed by a transport
    def feed(self, data: "bytes | memoryview") -> None:
        """The next bytes from the connection (any bytes-like object; not kept). ReplyError when they are not
        HTTP/1.1 or over a limit (the head's bytes are fed only up to :data:`MAX_HEAD_BYTES`)."""
        if self.done:
            self._leftover = self._leftover or bool(data)
            return
        if not self.head_done:
            if len(data) > self._head_room:  # the head must end within the room left: feed that much first
                room = self._head_room
                self._head_room = 0
                self._feed(memoryview(data)[:room])
                if not self.head_done:
                    raise ReplyError(f"the reply's head is over the client's limit of {MAX_HEAD_BYTES} bytes")
                self.feed(memoryview(data)[room:])
                return
            self._head_room -= len(data)
        self._feed(data)

    def _feed(self, data: "bytes | memoryview") -> None:
        try:
            self._parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            raise ReplyError(f"the server switched protocols (status {self.status}): not an HTTP/1.1 reply") from None
        except httptools.HttpParserError as exc:  # a callback's exception comes as its context
            if isinstance(exc.__context__, _NextMessage):
                self._leftover = True
                return
            cause = exc.__context__ if isinstance(exc.__context__, ReplyError) else None  # a limit of on_body's
            raise cause or ReplyError(f"the reply is not HTTP/1.1: {exc}") from None

    def feed_eof(self) -> None:
        """The server closed the connection: the end of a body that runs until then, else :class:`ReplyCut`
        (``ConnectionResetError`` before any byte, which a transport may retry)."""
        if self.done:
            return
        if self.head_done and self._until_close:
            self.done = True
            self._leftover = True  # the connection is gone
            return
        raise ReplyCut("the server closed the connection in the middle of its reply")

    def take(self) -> bytes:
        """The body bytes that arrived since the last call."""
        out = b"".join(self.pieces)
        self.pieces.clear()
        return out

    @property
    def reusable(self) -> bool:
        return self.done and not self._leftover and self._keep_alive


class LineSplitter:
    """A body's lines as its bytes arrive (without their line ends; a last line without one at :meth:`end`).
    ReplyError for a line that is not UTF-8. The pieces of a line are joined once, when its end arrives (a long
    line in many pieces costs linear time)."""

    def __init__(self) -> None:
        self._pending: List[bytes] = []  # the pieces of the line not yet ended

    def feed(self, data: bytes) -> List[str]:
        self._pending.append(data)
        if b"\n" not in data:
            return []
        *lines, last = b"".join(self._pending).split(b"\n")
        self._pending = [last]
        return [_utf8(line) for line in lines]

    def end(self) -> List[str]:
        last = b"".join(self._pending)
        self._pending = []
        return [_utf8(last)] if last else []


def _utf8(line: bytes) -> str:
    try:
        return line.decode("utf-8").rstrip("\r")
    except UnicodeDecodeError as exc:
        raise ReplyError(f"a line of the streamed reply is not UTF-8 ({exc.reason} at byte {exc.start}): "
                         f"{line[:80]!r}") from None


_Conn = TypeVar("_Conn")
_TakenConn = TypeVar("_TakenConn", contravariant=True)


class Pool(Protocol[_TakenConn]):
    def put(self, conn: _TakenConn, reusable: bool) -> None:
        """Take back a connection whose reply is done with (closed unless ``reusable``)."""


class PooledReply(Generic[_Conn]):
    """What the lean transports' replies share: the surface of ``httpx.Response`` the clients read
    (``status_code``, ``headers.get``, ``content``, ``is_success``, ``text``), and the connection they hold while
    their body is streamed (``conn``; None once the body is read whole), which goes back to ``pool`` at the end.
    ``per_wait_s``: how long each read of a streamed body may wait."""

    def __init__(self, reader: ReplyReader, conn: Optional[_Conn], pool: Pool[_Conn], per_wait_s: float) -> None:
        self.status_code = reader.status
        self.headers = reader.headers  # case-insensitive get()
        self._reader = reader
        self._conn = conn
        self._pool = pool
        self._per_wait_s = per_wait_s
        self.content = b"" if conn is not None else reader.take()

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", "replace")

    def _release(self) -> None:
        """Hand the connection back: reusable only when the body was read to its end."""
        conn, self._conn = self._conn, None
        if conn is not None:
            self._pool.put(conn, self._reader.reusable)
