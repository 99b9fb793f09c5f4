"""Both clients against a scripted hostile server on 127.0.0.1 (issue 43, "Client"): a streamed answer that breaks
after it began (the server killed after some deltas, a chunked body cut or with a bad chunk size, a stall, invalid
UTF-8 in an event, a reset connection), reply heads without end (one endless header, endless headers), and 1xx
replies the client did not ask for. Every failure must be a ``ClientError`` subclass (``Unavailable`` when the
connection broke or went quiet, ``BadResponse`` when the bytes are not a reply the client can read) within the
configured timeout and in bounded memory; a 1xx is skipped and the real reply read."""
from __future__ import annotations

import socket
import struct
import time
import tracemalloc
from urllib.parse import urlsplit

import orjson
import pytest
from client_drivers import CLIENTS, MAKERS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from raw_http import CLOSE, RawServer, reply

from medretrieve.client import BadResponse, ClientError, Unavailable
from medretrieve.records import Answer, Citation, Hit, SearchResult

HIT = Hit("demo-002#0", "demo-002", "Metformin is the first-line drug for type 2 diabetes.", "Diabetes", "treatment",
          0.91, {}, {}, None)
ANSWER = Answer("What treats type 2 diabetes?", "Metformin [1].", citations=[
    Citation("Metformin [1].", [1], True, 0.8, "entailed")], evidence=[HIT], sources_used=1)
RESULT = orjson.dumps(SearchResult("q", [HIT], "factoid", False, [], False, [], {"total": 1.0}).to_dict())
HEAD = (b"HTTP/1.1 200 OK\r\ndate: Sat, 05 Dec 2026 16:00:00 GMT\r\nserver: uvicorn\r\n"
        b"content-type: text/event-stream; charset=utf-8\r\nserver-timing: total;dur=12.5\r\n"
        b"transfer-encoding: chunked\r\n\r\n")


def _event(kind: str, data: object) -> bytes:
    """One server-sent event as medretrieve serve writes it (server/answers.py)."""
    return b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n"


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


EVIDENCE = _chunk(_event("evidence", {"hits": [HIT.to_dict()]}))
DELTAS = [_chunk(_event("delta", {"text": piece})) for piece in ("Metformin", " [1]", ".")]
LAST = _chunk(_event("answer", ANSWER.to_dict())) + b"0\r\n\r\n"
# a whole streamed answer as it travels (the head, one chunk per event, the last chunk), for the scripted faults
STREAM = HEAD + EVIDENCE + b"".join(DELTAS) + LAST


def _answering(*pieces: object):
    """A script: ``pieces`` for /v1/answer (bytes, seconds to sleep, CLOSE), a whole search reply otherwise."""
    def script(n, request):
        if b"/v1/answer" not in request.split(b"\r\n", 1)[0]:
            return [reply(200, RESULT)]
        return list(pieces)
    return script


@pytest.fixture(params=CLIENTS)
def make(request):
    return MAKERS[request.param]


def _events(client):
    out = []
    for event in client.stream_answer("What treats type 2 diabetes?"):
        out.append(event.kind)
    return out


def test_the_recorded_stream_reads_whole(make):
    with RawServer(_answering(STREAM)) as srv, make(srv.url) as client:
        assert _events(client) == ["evidence", "delta", "delta", "delta", "answer"]


BROKEN_STREAMS = {
    # name: (what the server sends for /v1/answer, the error the caller gets, what its message says)
    "killed after three deltas": ([HEAD, EVIDENCE, *DELTAS, CLOSE], Unavailable, "broke"),
    "chunked body cut inside a chunk": ([HEAD, EVIDENCE, DELTAS[0][:9], CLOSE], Unavailable, "broke"),
    "bad chunk size": ([HEAD, EVIDENCE, b"zz\r\nxx\r\n", 0.5], BadResponse, "not HTTP/1.1"),
    "chunk longer than it says": ([HEAD, EVIDENCE, b"3\r\nabcdef\r\n", 0.5], BadResponse, "not HTTP/1.1"),
    "stall after the evidence": ([HEAD, EVIDENCE, 3.0], Unavailable, "no reply within"),
    "invalid UTF-8 in an event": ([HEAD, EVIDENCE, _chunk(b'event: delta\ndata: {"text": "\xff\xfe"}\n\n'), LAST],
                                  BadResponse, "UTF-8"),
    "event data that is not JSON": ([HEAD, EVIDENCE, _chunk(b"event: delta\ndata: {nope\n\n"), LAST],
                                    BadResponse, "not the medretrieve API's"),
    "close-delimited stream cut before its answer": (
        [HEAD.replace(b"transfer-encoding: chunked\r\n", b"connection: close\r\n"),
         _event("evidence", {"hits": []}), CLOSE], Unavailable, "ended before its answer"),
    "an error reply cut in its body": ([b"HTTP/1.1 500 X\r\nContent-Length: 100\r\n\r\n{\"err", CLOSE],
                                       Unavailable, "broke"),
}


@pytest.mark.parametrize("name", sorted(BROKEN_STREAMS))
def test_a_stream_that_breaks_after_it_began_is_a_typed_error_in_time(make, name):
    pieces, error, message = BROKEN_STREAMS[name]
    with RawServer(_answering(*pieces)) as srv, make(srv.url, timeout_s=1.0, retries=0) as client:
        t0 = time.monotonic()
        with pytest.raises(error, match=message):
            _events(client)
        assert time.monotonic() - t0 < 2.5  # the 1 s timeout, with room for a loaded machine


class _ResettingServer(RawServer):
    """Sends the whole head and some events, then resets the connection (SO_LINGER 0: an RST, as when the
    server's host drops it) instead of closing it in order."""

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            request = b""
            while b"\r\n\r\n" not in request:
                request += conn.recv(65536)
            conn.sendall(HEAD + EVIDENCE + DELTAS[0])
            time.sleep(0.2)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))


def test_a_stream_whose_connection_is_reset_is_unavailable(make):
    with _ResettingServer(lambda n, request: []) as srv, make(srv.url, timeout_s=2.0, retries=0) as client:
        with pytest.raises(Unavailable, match="broke"):
            _events(client)


@pytest.fixture(scope="module")
def recorded(server):
    """A streamed answer as ``medretrieve serve`` writes it (uvicorn's head, one chunk per event, the last
    chunk), recorded off the wire from the test session's server."""
    body = orjson.dumps({"question": "What is the first-line drug treatment for type 2 diabetes?", "k": 3,
                         "stream": True})
    parts = urlsplit(server.url)
    with socket.create_connection((parts.hostname, parts.port), timeout=60) as sock:
        sock.sendall(b"POST /v1/answer HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (parts.netloc.encode(), len(body), body))
        wire = b""
        while True:
            piece = sock.recv(65536)
            if not piece:
                break
            wire += piece
    assert wire.startswith(b"HTTP/1.1 200") and b"chunked" in wire and wire.endswith(b"0\r\n\r\n"), wire[:300]
    with RawServer(_answering(wire, CLOSE)) as srv, MAKERS["Client"](srv.url) as client:
        kinds = _events(client)
    assert kinds[0] == "evidence" and kinds[-1] == "answer"  # with deltas between when the LLM wrote it
    return wire, kinds


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_stream_cut_at_any_byte_is_unavailable_or_bad(make, recorded, data):
    """A recorded answer cut at any byte (the server closes there): the events before the cut arrive, then
    Unavailable (or BadResponse, where the cut leaves bytes that cannot be HTTP); never another exception. A cut
    after the answer event (in the body's last chunk) loses nothing: the answer stands, without an error."""
    wire, whole = recorded
    cut = data.draw(st.integers(0, len(wire) - 1), label="cut")
    with RawServer(_answering(wire[:cut], CLOSE)) as srv, make(srv.url, timeout_s=2.0, retries=0) as client:
        seen = []
        try:
            for event in client.stream_answer("What treats type 2 diabetes?"):
                seen.append(event.kind)
        except ClientError as exc:
            assert isinstance(exc, (Unavailable, BadResponse)), repr(exc)
            assert "answer" not in seen and seen == whole[:len(seen)]
        else:
            assert seen == whole and cut >= len(wire) - len(b"0\r\n\r\n") - len(b"\r\n")


def _endless_header(n, request):
    """A reply head that never ends: one header value of 8 MiB, sent fast."""
    return [b"HTTP/1.1 200 OK\r\nX-Endless: ", *[b"a" * 65536] * 128, 1.0]


def _many_headers(n, request):
    return [b"HTTP/1.1 200 OK\r\n", *[b"".join(b"X-%d: 1\r\n" % (i * 1000 + j) for j in range(1000))
                                      for i in range(100)], 1.0]


@pytest.mark.parametrize("script", [_endless_header, _many_headers], ids=["one endless header", "100k headers"])
def test_an_endless_reply_head_costs_bounded_memory(make, script):
    with RawServer(script) as srv, make(srv.url, timeout_s=3.0, retries=0) as client:
        tracemalloc.start()
        try:
            with pytest.raises(BadResponse, match="head"):
                client.search("q")
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
    assert peak < 2 * 2**20, f"the client held {peak / 2**20:.1f} MiB for a reply head"


INTERIM = {"100 Continue": b"HTTP/1.1 100 Continue\r\n\r\n",
           "103 Early Hints": b"HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n",
           "two 1xx": b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n"}


@pytest.mark.parametrize("name", sorted(INTERIM))
def test_an_interim_reply_is_skipped_and_the_real_one_read(make, name):
    interim = INTERIM[name]
    search = lambda n, request: [interim, 0.05, reply(200, RESULT, ["Server-Timing: total;dur=2.0"])]  # noqa: E731
    with RawServer(search) as srv, make(srv.url, retries=0) as client:
        assert client.search("q").hits[0].document_id == "demo-002"
        assert client.last_server_timing == {"total": 2.0}
        assert client.search("q").question == "q" and srv.connections == 1  # the connection is still good
    with RawServer(_answering(interim + STREAM)) as srv, make(srv.url, retries=0) as client:
        assert _events(client)[-1] == "answer"
