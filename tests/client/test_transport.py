"""The clients' lean transports (medretrieve.client.transport, and its asyncio twin async_transport) against
scripted raw-socket servers: keep-alive reuse, idle connections the server closed, ``Connection: close``, one
deadline for a whole attempt, streams, size limits. Every test runs with ``Client`` and with ``AsyncClient``."""
from __future__ import annotations

import asyncio
import time

import orjson
import pytest
from client_drivers import SyncedAsyncClient
from raw_http import CLOSE, RawServer, reply

from medretrieve.client import AsyncClient, BadResponse, Unavailable, http11
from medretrieve.client import Client as Client_
from medretrieve.records import SearchResult

RESULT = orjson.dumps(SearchResult("q", [], "factoid", False, [], False, [], {"total": 1.0}).to_dict())
ANSWER_EVENT = b'event: answer\ndata: {"question": "q", "text": "Metformin."}\n\n'  # a stream's last event


@pytest.fixture(params=["Client", "AsyncClient"])
def Client(request):  # noqa: N802 (stands for either client class)
    return Client_ if request.param == "Client" else SyncedAsyncClient


def test_searches_share_one_keep_alive_connection(Client):
    timing = ["Server-Timing: queue;dur=0.01, work;dur=2.50, total;dur=3.00"]
    with RawServer(lambda n, request: [reply(200, RESULT, timing)]) as srv, Client(srv.url) as client:
        assert client.last_server_timing == {}
        assert [client.search("q").question for _ in range(5)] == ["q"] * 5
        assert srv.connections == 1
        assert client.last_server_timing == {"queue": 0.01, "work": 2.5, "total": 3.0}
        head, _, body = srv.requests[0].partition(b"\r\n\r\n")
        assert head.startswith(b"POST /v1/search HTTP/1.1") and b"content-type: application/json" in head.lower()
        assert orjson.loads(body) == {"question": "q", "k": 10}


def test_an_idle_connection_the_server_closed_is_replaced(Client):
    """uvicorn closes a keep-alive connection idle past its timeout (5 s): the next call opens a new one."""
    with RawServer(lambda n, request: [reply(200, RESULT), 0.05, CLOSE]) as srv, Client(srv.url) as client:
        for _ in range(3):
            assert client.search("q").question == "q"
            time.sleep(0.2)  # the server has closed it by now
        assert srv.connections == 3


def test_a_connection_the_server_closes_is_not_reused(Client):
    script = lambda n, request: [reply(200, RESULT, ["Connection: close"]), CLOSE]  # noqa: E731
    with RawServer(script) as srv, Client(srv.url) as client:
        assert [client.search("q").question for _ in range(3)] == ["q"] * 3
        assert srv.connections == 3


def test_a_reply_trickled_a_byte_at_a_time_is_bounded_by_the_attempts_timeout(Client):
    """Each byte comes well within the timeout, but the whole reply would take ~6 s: the attempt gives up at its
    timeout (a per-receive socket timeout alone would wait for all of it)."""
    whole = reply(200, RESULT)
    with RawServer(lambda n, request: [piece for b in whole for piece in (bytes([b]), 0.01)]) as srv:
        with Client(srv.url, timeout_s=0.5, retries=0) as client:
            t0 = time.monotonic()
            with pytest.raises(Unavailable, match="no reply within 0.50 s"):
                client.search("q")
            assert time.monotonic() - t0 < 1.5


def test_a_server_that_closes_without_answering_is_unavailable(Client):
    with RawServer(lambda n, request: [CLOSE]) as srv, Client(srv.url, retries=0) as client:
        with pytest.raises(Unavailable, match="cannot reach the server"):
            client.search("q")


def _chunk(data: bytes) -> bytes:
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


def _events_then(rest):
    """A script: a streamed answer (evidence, a delta, then ``rest``) for /v1/answer, a search result otherwise."""
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

    def script(n, request):
        if b"/v1/answer" not in request.split(b"\r\n", 1)[0]:
            return [reply(200, RESULT)]
        return [head, _chunk(b'event: evidence\ndata: {"hits": []}\n\n'),
                _chunk(b'event: delta\ndata: {"text": "Metformin"}\n\n'), *rest]
    return script


def test_a_streamed_answer_read_to_its_end_leaves_its_connection_for_the_next_call(Client):
    with RawServer(_events_then([_chunk(ANSWER_EVENT), b"0\r\n\r\n"])) as srv, Client(srv.url) as client:
        assert [e.kind for e in client.stream_answer("q")] == ["evidence", "delta", "answer"]
        assert client.search("q").question == "q"
        assert srv.connections == 1


def test_leaving_a_streamed_answer_early_closes_its_connection(Client):
    """Closing the connection is how the server learns to cancel the generation: it must not go back to the pool."""
    with RawServer(_events_then([2.0, b"0\r\n\r\n"])) as srv, Client(srv.url) as client:
        for event in client.stream_answer("q"):
            assert event.kind == "evidence"
            break
        t0 = time.monotonic()
        assert client.search("q").question == "q"
        assert srv.connections == 2 and time.monotonic() - t0 < 1.5


def test_a_streamed_reply_that_closes_its_connection_is_read_to_its_end(Client):
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n"
    script = lambda n, request: [head, b'event: evidence\ndata: {"hits": []}\n\n', ANSWER_EVENT, CLOSE]  # noqa: E731
    with RawServer(script) as srv, Client(srv.url) as client:
        assert [e.kind for e in client.stream_answer("q")] == ["evidence", "answer"]


def test_a_reply_over_the_size_limit_is_refused_not_held(Client, monkeypatch):
    monkeypatch.setattr(http11, "MAX_REPLY_BYTES", 1000)
    declared = [b"HTTP/1.1 200 OK\r\nContent-Length: 10000000000\r\n\r\n{", 1.0]
    chunked = [b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", *[_chunk(b"x" * 100)] * 20, b"0\r\n\r\n"]
    for script in (lambda n, request: declared, lambda n, request: chunked):
        with RawServer(script) as srv, Client(srv.url, retries=0) as client:
            with pytest.raises(BadResponse, match="over the client's limit"):
                client.search("q")


def test_an_async_client_used_from_a_second_event_loop_opens_a_new_connection():
    """Connections belong to the loop that opened them: a second ``asyncio.run`` must not reuse the first's."""
    with RawServer(lambda n, request: [reply(200, RESULT)]) as srv:
        client = AsyncClient(srv.url)
        assert [asyncio.run(client.search("q")).question for _ in range(2)] == ["q", "q"]
        assert srv.connections == 2
        asyncio.run(client.aclose())
