"""A small scripted OpenAI-compatible chat-completions server for tests.

Shared by every test that needs an LLM without a real model (generation,
MedRGB runs, LLM query expansion)::

    from llm_server import FakeLLMServer, chat_reply, scripted

    def reply(request_json):
        return 200, chat_reply("EXACT: yes\\nIDEAL: ..."), 0.0

    with FakeLLMServer(reply) as srv:
        backend = OpenAIBackend(srv.base_url, "fake-model")
        ...
        assert srv.requests[0]["json"]["model"] == "fake-model"

The handler is called with the parsed JSON body of each POST to
``.../chat/completions`` (``None`` when the body is not JSON) and returns
``(status, body, delay_s)`` or ``(status, body, delay_s, headers)``:

- ``body`` a ``dict``/``list`` is sent as JSON, a ``str`` or ``bytes`` is sent
  verbatim (so tests can send malformed JSON or HTML error pages), a
  :class:`Trickle` a few bytes at a time (a server that stalls mid-body; when
  the client closes the connection before the end, ``srv.dropped_at`` notes
  when the server found out);
- ``delay_s`` is slept before the reply is written (slow servers, deadlines);
- ``headers`` (dict) are added to the reply, e.g. ``{"Retry-After": "1"}``.

``stream_reply(pieces)`` is such a tuple for a streamed completion (``"stream": true``).

A handler may also return a plain ``str``: shorthand for ``(200, chat_reply(s), 0.0)``.

``base_url`` ends in ``/v1`` like real servers (vLLM, llama.cpp, OpenAI), so
clients append ``/chat/completions``. ``GET /v1/models`` lists one model.
Every request is recorded in ``srv.requests`` (dicts with ``path``,
``headers``, ``json``) for assertions.
"""
from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable, Iterable, Optional, Union

Reply = Union[str, tuple]
Handler = Callable[[Any], Reply]

__all__ = ["FakeLLMServer", "Trickle", "chat_reply", "stream_reply", "error_reply", "scripted", "refused_base_url"]


class Trickle:
    """A reply body written ``chunk`` bytes at a time, ``interval_s`` apart (Content-Length announces it all)."""

    def __init__(self, payload: bytes, chunk: int = 1, interval_s: float = 0.5) -> None:
        self.payload, self.chunk, self.interval_s = payload, chunk, interval_s


def chat_reply(content: str, model: str = "fake-model", finish_reason: str = "stop") -> dict:
    """An OpenAI chat-completion response body whose single choice says ``content``."""
    return {
        "id": "chatcmpl-fake",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": finish_reason,
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


def stream_reply(pieces: Iterable[str], model: str = "fake-model") -> tuple:
    """A streamed chat completion (``"stream": true``): one server-sent event per piece of text, then
    ``[DONE]``, as OpenAI-compatible servers send them."""
    events = [{"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model,
               "choices": [{"index": 0, "delta": {"content": p}, "finish_reason": None}]} for p in pieces]
    events.append({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "model": model,
                   "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    body = "".join(f"data: {json.dumps(e)}\n\n" for e in events) + "data: [DONE]\n\n"
    return 200, body.encode(), 0.0, {"Content-Type": "text/event-stream"}


def error_reply(message: str, type_: str = "invalid_request_error", code: Optional[str] = None) -> dict:
    """An OpenAI-style error body (``{"error": {...}}``)."""
    return {"error": {"message": message, "type": type_, "code": code, "param": None}}


def scripted(replies: Iterable[Reply], repeat_last: bool = True) -> Handler:
    """A handler that answers with ``replies`` in order (one per request).

    After the script runs out the last reply is repeated (``repeat_last``) or
    the server answers 500 ``"script exhausted"`` so an unexpected extra call
    shows up in the test.
    """
    items = list(replies)
    if not items:
        raise ValueError("scripted() needs at least one reply")
    lock = threading.Lock()
    state = {"i": 0}

    def handler(_request: Any) -> Reply:
        with lock:
            i = state["i"]
            state["i"] += 1
        if i < len(items):
            return items[i]
        if repeat_last:
            return items[-1]
        return 500, error_reply("script exhausted", "server_error"), 0.0

    return handler


def refused_base_url() -> str:
    """A loopback base URL on which nothing listens (connection refused)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # The socket is closed again: connecting to it is refused.
    return f"http://127.0.0.1:{port}/v1"


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, handler_cls, owner: "FakeLLMServer"):
        self.owner = owner
        super().__init__(addr, handler_cls)


class _RequestHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    # Headers and body go out in two writes: without TCP_NODELAY, Nagle + delayed ACK
    # add ~40 ms to every reply on loopback.
    disable_nagle_algorithm = True
    server: _Server

    def log_message(self, fmt: str, *args: Any) -> None:  # keep test output quiet
        pass

    def _send(self, status: int, body: Any, headers: Optional[dict] = None) -> None:
        trickle = body if isinstance(body, Trickle) else None
        if trickle is not None:
            body = trickle.payload
        if isinstance(body, (dict, list)):
            payload = json.dumps(body).encode()
            ctype = "application/json"
        elif isinstance(body, bytes):
            payload, ctype = body, "application/octet-stream"
        else:
            payload, ctype = str(body).encode(), "text/plain; charset=utf-8"
        try:
            self.send_response(status)
            if not any(k.lower() == "content-type" for k in (headers or {})):
                self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(payload)))
            for k, v in (headers or {}).items():
                self.send_header(k, str(v))
            self.end_headers()
            if trickle is None:
                self.wfile.write(payload)
                self.wfile.flush()
                return
            for i in range(0, len(payload), trickle.chunk):
                self.wfile.write(payload[i:i + trickle.chunk])
                self.wfile.flush()
                if self.server.owner._stopping.wait(trickle.interval_s):
                    return
        except (BrokenPipeError, ConnectionResetError):
            if trickle is not None:  # the client closed the connection part-way through a trickled reply
                with self.server.owner._lock:
                    self.server.owner.dropped_at.append(time.monotonic())

    def do_GET(self) -> None:  # noqa: N802 (http.server naming)
        if self.path.rstrip("/").endswith("/models"):
            self._send(200, {"object": "list", "data": [{"id": "fake-model", "object": "model"}]})
        else:
            self._send(404, error_reply(f"no route {self.path}", "not_found"))

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
        owner = self.server.owner
        with owner._lock:
            owner.requests.append({"path": self.path, "headers": dict(self.headers), "json": body})
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, error_reply(f"no route {self.path}", "not_found"))
            return
        try:
            reply = owner.handler(body)
        except Exception as exc:  # a broken test handler shows up as a 500
            self._send(500, error_reply(f"test handler raised {exc!r}", "server_error"))
            return
        if isinstance(reply, str):
            reply = (200, chat_reply(reply), 0.0)
        status, payload, delay = reply[0], reply[1], float(reply[2]) if len(reply) > 2 else 0.0
        headers = reply[3] if len(reply) > 3 else None
        if delay > 0 and owner._stopping.wait(delay):
            return  # server is shutting down: drop the reply
        self._send(int(status), payload, headers)


class FakeLLMServer:
    """Threaded OpenAI-compatible server on ``127.0.0.1`` and a random free port.

    Use as a context manager (or ``start()``/``stop()``). ``handler`` defaults
    to one that always answers ``"ok"``.
    """

    def __init__(self, handler: Optional[Handler] = None, host: str = "127.0.0.1", port: int = 0):
        self.handler: Handler = handler or (lambda _req: "ok")
        self.requests: list[dict] = []
        # when (time.monotonic()) a client closed its connection part-way through a trickled reply
        self.dropped_at: list[float] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._host, self._port = host, port
        self._server: Optional[_Server] = None
        self._thread: Optional[threading.Thread] = None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("FakeLLMServer is not running")
        return self._server.server_address[1]

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT/v1``."""
        return f"http://{self._host}:{self.port}/v1"

    def start(self) -> "FakeLLMServer":
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = _Server((self._host, self._port), _RequestHandler, self)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is None:
            return
        self._stopping.set()  # wakes handlers sleeping on a scripted delay
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._server = None
        self._thread = None

    def __enter__(self) -> "FakeLLMServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
