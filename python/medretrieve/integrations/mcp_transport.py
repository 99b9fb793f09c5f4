"""``medretrieve mcp``'s transports, where every request gets a reply: each stdio line, each HTTP body.

The SDK's stdio transport drops a line it cannot parse without a word (a lone-surrogate escape such as ``"\\ud83d"``,
which an LLM writes when it cuts an emoji in half; a number of 5,000 digits; arguments nested 100,000 deep; text
that is not JSON or not JSON-RPC), so the agent waits for its own timeout. This transport reads the lines itself:
a line that is a JSON-RPC message goes to the server as before; any other gets a JSON-RPC error at once, ``-32700``
(parse error: not JSON the SDK reads) or ``-32600`` (invalid request: JSON, but no JSON-RPC message), with the
line's ``id`` when it can be read (:func:`readable_id`), else ``null``. A line longer than :data:`MAX_LINE_BYTES`
is not kept whole: it is answered ``-32600``. Blank lines are not requests: they are skipped.

Over streamable HTTP the SDK answers such bodies itself, but with other codes and no id (a JSON array gets
``-32602``): :class:`EveryBodyAnswered` answers a JSON body that :func:`read_line` refuses with the same error
as stdio (HTTP 400), so both doors answer a broken request alike.

While it serves, fd 0 reads the null device and fd 1 writes to stderr (the protocol keeps its own copies), so a
library or native code that prints cannot corrupt the protocol, as in the SDK's transport.
"""
from __future__ import annotations

import contextlib
import json
import os
import re
from typing import Any, Awaitable, BinaryIO, Callable, Iterator, List, Optional, Tuple, Union

import anyio
from mcp.server.transport_security import DEFAULT_MAX_REQUEST_BODY_SIZE
from mcp.shared.message import SessionMessage
from mcp_types import (INVALID_REQUEST, PARSE_ERROR, ErrorData, JSONRPCError, JSONRPCNotification,
                       jsonrpc_message_adapter)
from pydantic import ValidationError

# the streamable-HTTP transport's limit on one request body, for one request line (bytes)
MAX_LINE_BYTES: int = DEFAULT_MAX_REQUEST_BODY_SIZE
ID_SCAN_CHARS = 65_536  # how far into a broken line the id is looked for (characters): the scan is pure Python
READ_BYTES = 65_536  # one read of stdin (bytes)

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},:]|[^"\[\]{},:]+', re.S)
_SHAPE = ('a JSON-RPC 2.0 message is an object with "jsonrpc": "2.0" and a "method" (a string) with "params" (an '
          'object) when given, and an "id" (a string or an integer) on a request')

Reply = Callable[[SessionMessage], Awaitable[None]]


class LineSplitter:
    """Bytes in, request lines out, each at most ``limit`` bytes: :meth:`feed` returns the lines a chunk ends, as
    ``(line, cut)``, ``cut`` telling that the line was longer than ``limit`` and only its start is kept."""

    def __init__(self, limit: int = MAX_LINE_BYTES) -> None:
        self.limit = limit
        self.pending = bytearray()
        self.cut = False

    def feed(self, chunk: bytes) -> List[Tuple[bytes, bool]]:
        lines: List[Tuple[bytes, bool]] = []
        start = 0
        while True:
            end = chunk.find(b"\n", start)
            part = chunk[start:] if end < 0 else chunk[start:end]
            room = self.limit - len(self.pending)
            if len(part) > room:
                self.pending += part[:max(room, 0)]
                self.cut = True
            else:
                self.pending += part
            if end < 0:
                return lines
            lines.append(self._take())
            start = end + 1

    def end(self) -> List[Tuple[bytes, bool]]:
        """The last line, when the input ended without a newline."""
        return [self._take()] if self.pending or self.cut else []

    def _take(self) -> Tuple[bytes, bool]:
        line = (bytes(self.pending), self.cut)
        self.pending.clear()
        self.cut = False
        return line


def _after_space(text: str, pos: int) -> int:
    while pos < len(text) and text[pos] in " \t\r\n":
        pos += 1
    return pos


def _value_end(text: str, pos: int) -> Optional[int]:
    """Where the JSON value starting at ``pos`` ends (the index of the ``,`` or ``}`` after it), scanning tokens
    with a depth count rather than recursion; None when the text ends first."""
    depth = 0
    for match in _TOKEN.finditer(text, pos):
        first = match.group()[0]
        if first in "[{":
            depth += 1
        elif first in "]}":
            if depth == 0:
                return match.start()
            depth -= 1
        elif first == "," and depth == 0:
            return match.start()
    return None


def readable_id(text: str) -> Union[str, int, None]:
    """The top-level ``"id"`` of a JSON-RPC message that cannot be parsed as a whole, when it is a string or an
    integer and stands in the first :data:`ID_SCAN_CHARS` characters before the damage; None otherwise. Only the
    top level is read, without recursion, so no nesting depth can exhaust it."""
    text = text[:ID_SCAN_CHARS]
    decoder = json.JSONDecoder()
    pos = _after_space(text, 0)
    if not text.startswith("{", pos):
        return None
    pos += 1
    while True:
        key = _TOKEN.match(text, _after_space(text, pos))
        if key is None or not key.group().startswith('"'):
            return None
        colon = _after_space(text, key.end())
        if not text.startswith(":", colon):
            return None
        value_at = _after_space(text, colon + 1)
        if key.group() == '"id"':
            try:
                value, _ = decoder.raw_decode(text, value_at)
            except (ValueError, RecursionError):
                return None
            if isinstance(value, str) and not re.search("[\ud800-\udfff]", value):
                return value
            return value if type(value) is int else None
        end = _value_end(text, value_at)
        if end is None or text[end] != ",":
            return None
        pos = end + 1


def _error(code: int, message: str, line: str) -> JSONRPCError:
    return JSONRPCError(jsonrpc="2.0", id=readable_id(line), error=ErrorData(code=code, message=message))


def read_line(line: str, cut: bool = False) -> Any:
    """A request line as the SDK's message, or the :class:`JSONRPCError` that answers it (see the module
    docstring); ``cut``: the line was longer than :data:`MAX_LINE_BYTES`."""
    if cut:
        return _error(INVALID_REQUEST, f"Invalid Request: the request is longer than {MAX_LINE_BYTES} bytes, the "
                                       "most one request may take", line)
    try:
        message = jsonrpc_message_adapter.validate_json(line, by_name=False)
    except ValidationError as exc:
        first = exc.errors()[0]
    else:
        # the SDK reads a request whose id is no string or integer as a notification (no reply): refuse it
        if isinstance(message, JSONRPCNotification) and "id" in json.loads(line):
            return _error(INVALID_REQUEST, "Invalid Request: the id must be a string or an integer", line)
        return message
    if first["type"] != "json_invalid":
        return _error(INVALID_REQUEST, f"Invalid Request: {_SHAPE}", line)
    said = f"Parse error: {first['msg']}"
    if "surrogate" in said or "hex escape" in said:
        said += (" (a \\uD800-\\uDFFF escape without its other half, such as half of an emoji: send the "
                 "character itself, or both halves of its escape)")
    return _error(PARSE_ERROR, said, line)


async def _forward_lines(stdin: Any, to_server: Any, reply: Reply) -> None:
    """Read stdin to its end: each message to the server, each broken line's error to ``reply``."""
    splitter = LineSplitter()
    async with to_server:
        while True:
            chunk = await stdin.read(READ_BYTES)  # unbuffered: what one read(2) gives
            lines = splitter.feed(chunk) if chunk else splitter.end()
            for raw, cut in lines:
                text = raw.decode("utf-8", errors="replace")  # as the SDK's transport reads stdin
                if not text.strip():
                    continue
                message = read_line(text, cut)
                if isinstance(message, JSONRPCError):
                    await reply(SessionMessage(message))
                else:
                    await to_server.send(SessionMessage(message))
            if not chunk:
                return


async def _write_messages(stdout: Any, from_server: Any) -> None:
    async with from_server:
        async for item in from_server:
            data = item.message.model_dump_json(by_alias=True, exclude_unset=True)
            await stdout.write(data.encode("utf-8") + b"\n")


@contextlib.contextmanager
def _claimed_stdio() -> Iterator[Tuple[BinaryIO, BinaryIO]]:
    """The protocol's own copies of fd 0 and fd 1, while fd 0 reads the null device and fd 1 writes to stderr;
    restored on exit. The input copy is never closed: a worker thread may still be blocked reading it."""
    wire_in, wire_out = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    try:
        os.dup2(null, 0)
        os.dup2(2, 1)
    finally:
        os.close(null)
    try:
        yield os.fdopen(wire_in, "rb", buffering=0, closefd=False), os.fdopen(wire_out, "wb", buffering=0)
    finally:
        os.dup2(wire_in, 0)
        os.dup2(wire_out, 1)


Serve = Callable[[Any, Any], Awaitable[None]]


async def serve_stdio(serve: Serve) -> None:
    """Run ``serve(read_stream, write_stream)`` (an MCP server's ``run``) over this process's stdin and stdout,
    every request line answered (module docstring)."""
    with _claimed_stdio() as (wire_in, wire_out):
        to_server, server_reads = anyio.create_memory_object_stream[Union[SessionMessage, Exception]](0)
        server_writes, from_server = anyio.create_memory_object_stream[SessionMessage](0)
        replies = server_writes.clone()  # the reader's own: the writer ends when the server's and this one close

        async def reply(message: SessionMessage) -> None:
            await replies.send(message)

        async def read() -> None:
            async with replies:
                await _forward_lines(anyio.wrap_file(wire_in), to_server, reply)

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(read)
            tasks.start_soon(_write_messages, anyio.wrap_file(wire_out), from_server)
            await serve(server_reads, server_writes)


class EveryBodyAnswered:
    """ASGI middleware in front of the SDK's streamable-HTTP app: a POST with a JSON body that is no JSON-RPC
    message (:func:`read_line`) is answered HTTP 400 with the JSON-RPC error stdio answers it with; any other
    request goes on to the app unchanged (the body read here handed on whole)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        headers = dict(scope.get("headers") or ()) if scope["type"] == "http" else {}
        media_type = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
        if scope.get("method") != "POST" or media_type != b"application/json":
            await self.app(scope, receive, send)
            return
        body, cut = bytearray(), False
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunk = message.get("body", b"")
            room = MAX_LINE_BYTES - len(body)
            cut = cut or len(chunk) > room
            body += chunk[:max(room, 0)]
            if cut or not message.get("more_body", False):
                break  # over the limit: answered now, the rest unread (the server closes the connection)
        checked = read_line(body.decode("utf-8", errors="replace"), cut)
        if isinstance(checked, JSONRPCError):
            reply = checked.model_dump_json(by_alias=True, exclude_unset=True).encode("utf-8")
            await send({"type": "http.response.start", "status": 400,
                        "headers": [(b"content-type", b"application/json"),
                                    (b"content-length", str(len(reply)).encode())]})
            await send({"type": "http.response.body", "body": reply})
            return
        handed_on = False

        async def replay() -> Any:
            nonlocal handed_on
            if handed_on:
                return await receive()  # after the body: the disconnect, when the client goes away
            handed_on = True
            return {"type": "http.request", "body": bytes(body), "more_body": False}

        await self.app(scope, replay, send)
