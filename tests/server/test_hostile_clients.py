"""A real ``medretrieve serve`` against hostile clients: huge bodies (refused unread, memory flat), connections
that trickle their headers or body (timed out and closed, and not waited for at SIGTERM), more connections than
the cap, and streamed answers whose client goes away (the LLM request is closed and the slot freed at once)."""
from __future__ import annotations

import json
import socket
import time
from pathlib import Path

import httpx
import pytest

from medretrieve.testing.server import ServerProcess

pytest.importorskip("uvicorn")

QUESTION = "What is the first-line drug treatment for type 2 diabetes?"
MiB = 1 << 20


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


def _connect(url: str) -> socket.socket:
    host, port = url.split("//", 1)[1].rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _read_reply(sock: socket.socket) -> bytes:
    """What the server sent until it closed the connection (a reset after its reply counts as the end)."""
    out = b""
    try:
        while True:
            data = sock.recv(65536)
            if not data:
                return out
            out += data
    except (ConnectionResetError, socket.timeout):
        return out


def _error(reply: bytes) -> dict:
    head, _, body = reply.partition(b"\r\n\r\n")
    return {"status": int(head.split()[1]), "head": head.decode("latin-1").lower(), **json.loads(body)["error"]}


@pytest.fixture(scope="module")
def guarded(medretrieve_collection):
    """Tight limits, so the tests take seconds: 1 MiB bodies, 2 s for headers and for a body, 60 connections."""
    with ServerProcess(medretrieve_collection.directory,
                       ["--max-body-bytes", str(MiB), "--header-timeout-s", "2", "--body-timeout-s", "2",
                        "--max-connections", "60"]) as srv:
        yield srv


def test_a_huge_body_is_refused_before_it_is_read(guarded):
    assert guarded.process is not None
    rss_before = _rss_mib(guarded.process.pid)
    # announced: 413 as soon as the headers are in, nothing of the 200 MB read
    with _connect(guarded.url) as sock:
        sock.sendall(b"POST /v1/search HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 200000000\r\n\r\n" + b"[" * 65536)
        err = _error(_read_reply(sock))
    assert err["status"] == 413 and err["type"] == "body_too_large" and "1048576" in err["message"]
    assert "connection: close" in err["head"]
    # chunked (no length announced): cut off once it grows past the cap; the connection closes long before 200 MB
    sent = 0
    with _connect(guarded.url) as sock:
        sock.sendall(b"POST /v1/search HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
        chunk = b"%x\r\n" % MiB + b"[" * MiB + b"\r\n"
        try:
            while sent < 200 * MiB:
                sock.sendall(chunk)
                sent += MiB
        except (BrokenPipeError, ConnectionResetError):
            pass
        reply = _read_reply(sock)
    assert sent < 50 * MiB, f"the server read {sent / MiB:.0f} MiB of an over-long body"
    if reply:  # a reset may discard the reply before it is read; when it arrived it is the 413
        assert _error(reply)["type"] == "body_too_large"
    assert _rss_mib(guarded.process.pid) - rss_before < 40, "the server buffered the body"
    with httpx.Client(base_url=guarded.url, timeout=30) as http:  # and it still serves
        assert http.post("/v1/search", json={"question": QUESTION, "k": 1}).status_code == 200


def test_connections_that_trickle_their_headers_or_body_are_closed_in_time(guarded):
    from slow_clients import Tricklers

    headers = Tricklers(guarded.url, 20, head=b"POST /v1/search HTTP/1.1\r\n", rest=b"X-Slow: yes\r\n" * 50)
    body = b'{"question": "' + b"a" * 200 + b'"}'
    bodies = Tricklers(guarded.url, 20, head=b"POST /v1/search HTTP/1.1\r\nHost: t\r\nContent-Type: application/json"
                       b"\r\nContent-Length: %d\r\n\r\n" % len(body), rest=body)
    with headers, bodies:
        # 2 s timeouts: every connection is closed within a few seconds, none lasts until its request is complete
        assert headers.wait_closed(8) and bodies.wait_closed(8), (headers.open_count(), bodies.open_count())
    for replies, what in ((headers.replies, "headers"), (bodies.replies, "body")):
        for reply in replies:
            err = _error(reply)
            assert err["status"] == 408 and err["type"] == "request_timeout" and what in err["message"]
    with httpx.Client(base_url=guarded.url, timeout=30) as http:
        assert http.post("/v1/search", json={"question": QUESTION, "k": 1}).status_code == 200


def test_a_requests_deadline_counts_from_its_first_byte(guarded):
    """The server stamps a request's arrival at its first byte (medretrieve.server.protocol), so time spent before
    the app sees it counts: headers that take 0.6 s leave a 300 ms deadline spent (504, no work done), and a
    request that arrives at once is searched within the same connection."""
    body = json.dumps({"question": QUESTION, "k": 1, "deadline_ms": 300}).encode()
    head = b"POST /v1/search HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\n"
    with _connect(guarded.url) as sock:
        sock.sendall(head)
        time.sleep(0.6)
        sock.sendall(b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        err = _error(_read_reply(sock))
    assert err["status"] == 504 and err["type"] == "deadline_exceeded", err
    waited_ms = float(err["message"].split("deadline passed ")[1].split(" ms")[0])
    assert waited_ms >= 550, err["message"]
    with _connect(guarded.url) as sock:
        sock.sendall(head + b"Connection: close\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
        reply = _read_reply(sock)
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]


def test_a_connection_over_the_cap_is_refused_at_once(guarded):
    idle = [_connect(guarded.url) for _ in range(60)]
    try:
        time.sleep(0.5)  # let the server accept them all
        with _connect(guarded.url) as extra:
            err = _error(_read_reply(extra))
        assert err["status"] == 503 and err["type"] == "too_many_connections" and "retry-after: 1" in err["head"]
    finally:
        for sock in idle:
            sock.close()


def test_trickling_clients_do_not_hold_shutdown(medretrieve_collection):
    from slow_clients import Tricklers

    # timeouts far beyond the test: shutdown itself must let go of them, well before the graceful timeout
    srv = ServerProcess(medretrieve_collection.directory,
                        ["--header-timeout-s", "120", "--body-timeout-s", "120", "--graceful-timeout", "60"]).start()
    try:
        body = b'{"question": "' + b"a" * 200 + b'"}'
        with Tricklers(srv.url, 20, head=b"POST /v1/search HTTP/1.1\r\n", rest=b"X-Slow: yes\r\n" * 100), \
                Tricklers(srv.url, 20, head=b"POST /v1/search HTTP/1.1\r\nHost: t\r\nContent-Length: %d\r\n\r\n"
                          % len(body), rest=body) as bodies:
            time.sleep(1.5)
            assert bodies.open_count() == 20
            t0 = time.monotonic()
            code = srv.stop(timeout_s=60)
            took = time.monotonic() - t0
    finally:
        srv.close()
    assert code == 0 and took < 10, f"SIGTERM took {took:.1f} s (exit {code})"


def test_a_dropped_stream_closes_its_llm_request_and_frees_its_slot(medretrieve_collection):
    from llm_server import FakeLLMServer, Trickle, stream_reply

    slow = stream_reply([f"word{i:03d} " for i in range(400)])  # ~60 kB at 2 kB/s: half a minute

    def reply(request_json):
        status, payload, delay, headers = slow
        return status, Trickle(payload, chunk=200, interval_s=0.1), delay, headers

    with FakeLLMServer(reply) as llm, \
            ServerProcess(medretrieve_collection.directory, ["--llm", llm.base_url, "--model", "m",
                                                             "--answer-concurrency", "2", "--max-queue", "0"]) as srv, \
            httpx.Client(base_url=srv.url, timeout=30) as http:
        body = {"question": QUESTION, "k": 3, "stream": True, "deadline_ms": 120000}

        def open_stream():
            response = http.send(http.build_request("POST", "/v1/answer", json=body), stream=True)
            lines = response.iter_lines()  # (kept: a collected line iterator closes its response)
            while not next(lines).startswith("event: delta"):
                pass
            return response, lines

        streams = [open_stream(), open_stream()]  # both answer slots generating
        assert http.post("/v1/answer", json={**body, "stream": False}).status_code == 429
        dropped = time.monotonic()
        for response, _ in streams:
            response.close()
        give_up = dropped + 5
        while (len(llm.dropped_at) < 2 or _inflight(http) > 0) and time.monotonic() < give_up:
            time.sleep(0.02)
        freed = time.monotonic() - dropped
        assert len(llm.dropped_at) == 2 and max(llm.dropped_at) - dropped < 1.0, "the LLM requests stayed open"
        assert _inflight(http) == 0 and freed < 1.0, f"the answer slots were freed after {freed:.2f} s"
        again, _ = open_stream()  # a slot is free again
        again.close()


def _inflight(http: httpx.Client) -> float:
    text = http.get("/metrics").text
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith('medretrieve_inflight{kind="answer"}'))
