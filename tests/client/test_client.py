"""medretrieve.client against a real server (library types back, typed errors) and against scripted transports
(retries after Retry-After, deadlines, timeouts)."""
from __future__ import annotations

import asyncio
import json
import socket

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from medretrieve.client import client as client_module
from medretrieve.client import (AsyncClient, BadResponse, Client, Forbidden, InvalidRequest, NotReady, Overloaded,
                                Unavailable)
from medretrieve.generation.generate import Answer
from medretrieve.retrieval.results import Hit, SearchResult
from medretrieve.wire import SearchRequest

QUESTION = "What is the first-line drug treatment for type 2 diabetes?"


def test_search_batch_and_answer_return_library_types(server, medretrieve_retriever):
    with Client(server.url) as client:
        res = client.search(QUESTION, k=3, deadline_ms=60000, rerank=True)
        local = medretrieve_retriever.search(QUESTION, k=3, deadline_ms=60000)
        assert isinstance(res, SearchResult) and isinstance(res.hits[0], Hit)
        assert [h.chunk_id for h in res.hits] == [h.chunk_id for h in local.hits]
        assert res.stage("dense").ran
        off = client.search(QUESTION, k=2, sections=["symptoms"], recovery=False, explain=True)
        assert not off.stage("recovery").ran and "filter" in off.stage("route").reason
        batch = client.search_batch([QUESTION, "asthma inhaler"], k=2)
        assert [type(r) for r in batch] == [SearchResult, SearchResult] and batch[1].question == "asthma inhaler"
        ans = client.answer(QUESTION, k=3)
        assert isinstance(ans, Answer) and ans.citations[0].supported and isinstance(ans.evidence[0], Hit)
        events = list(client.stream_answer(QUESTION, k=3))
        assert [e.kind for e in events] == ["evidence", "delta", "delta", "answer"]
        assert events[0].hits[0].document_id == "demo-002"
        assert "".join(e.text for e in events if e.kind == "delta") == events[-1].answer.text
        assert client.ready() and client.health()["status"] == "ok"
        assert client.collection()["documents"] == 24 and "medretrieve_requests_total" in client.metrics()


def test_typed_errors_from_the_server(server):
    with Client(server.url) as client:
        with pytest.raises(Forbidden, match="reload"):
            client.reload()


def test_a_request_the_server_would_refuse_is_refused_before_sending():
    """The client checks its requests with the server's own models (medretrieve.wire): same rules, no round trip."""
    transport, seen = scripted()
    with Client("http://test", transport=transport) as client:
        with pytest.raises(InvalidRequest) as info:
            client.search(QUESTION, k=0)
        assert info.value.status == 0 and info.value.field == "k" and info.value.type == "invalid_request"
        with pytest.raises(InvalidRequest, match="sections"):
            client.search(QUESTION, sections=["kitchen"])
        with pytest.raises(InvalidRequest) as info:
            client.search(QUESTION, deadline_ms=700_000)
        assert info.value.field == "deadline_ms"
        with pytest.raises(TypeError, match="fast"):  # an unknown (misspelt) option, as Retriever.search says
            client.search(QUESTION, fast=True)
        # no coercion: strings and booleans are not numbers (the server refuses them; so does Retriever.search)
        for bad in (dict(k="5"), dict(k=True), dict(deadline_ms="300"), dict(per_document=False),
                    dict(sections="treatment"), dict(rerank=1), dict(explain="yes")):
            with pytest.raises(TypeError, match=next(iter(bad))):
                client.search(QUESTION, **bad)
            with pytest.raises(TypeError, match=next(iter(bad))):
                client.search_batch([QUESTION], **bad)
        assert isinstance(info.value, ValueError)  # as Retriever.search's refusal of the same request
        with pytest.raises(InvalidRequest, match="mode"):
            client.answer(QUESTION, mode="poetry")
    assert seen == []


def test_a_refusal_from_the_server_is_a_typed_error():
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(422, json={"error": {"type": "invalid_request", "message": "k: too many",
                                                   "field": "k"}})

    with Client("http://test", transport=httpx.MockTransport(handler)) as client:
        with pytest.raises(InvalidRequest) as info:
            client.search(QUESTION)
    assert info.value.status == 422 and info.value.field == "k" and "too many" in info.value.message


def test_async_client(server):
    async def main():
        async with AsyncClient(server.url) as client:
            results = await asyncio.gather(*(client.search(q, k=2) for q in (QUESTION, "gout", "asthma")))
            assert [r.question for r in results] == [QUESTION, "gout", "asthma"]
            assert client.last_server_timing["total"] >= client.last_server_timing["work"] > 0
            kinds = [e.kind async for e in client.stream_answer(QUESTION, k=3)]
            assert kinds[0] == "evidence" and kinds[-1] == "answer"
            assert (await client.answer(QUESTION)).text.startswith("Metformin")
            with pytest.raises(InvalidRequest):
                await client.search(" ")
            assert await client.ready()
    asyncio.run(main())


def test_refused_connection_is_unavailable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with Client(f"http://127.0.0.1:{port}", retries=1) as client:
        with pytest.raises(Unavailable, match="cannot reach"):
            client.search(QUESTION)
        with pytest.raises(Unavailable, match="cannot reach"):
            client.ready()

    async def main():
        async with AsyncClient(f"http://127.0.0.1:{port}") as client:
            with pytest.raises(Unavailable, match="cannot reach"):
                await client.ready()
    asyncio.run(main())


# ------------------------------------------------------------------ retries, against scripted replies

def _search_reply(question: str = "q") -> dict:
    return SearchResult(question, [], "factoid", False, [], False, [], {"total": 1.0}).to_dict()


def scripted(*replies):
    """A mock transport answering ``(status, headers)`` in order (then a search result); records the bodies."""
    seen = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content) if request.content else None)
        if len(seen) <= len(replies):
            status, headers = replies[len(seen) - 1]
            return httpx.Response(status, headers=headers, json={"error": {"type": "x", "message": "busy"}})
        return httpx.Response(200, json=_search_reply())

    return httpx.MockTransport(handler), seen


def test_429_and_503_are_retried_after_retry_after():
    transport, seen = scripted((429, {"Retry-After": "0"}), (503, {"Retry-After": "0"}))
    with Client("http://test", transport=transport, retries=2) as client:
        assert client.search("q").question == "q"
    assert len(seen) == 3


def test_retries_run_out_with_a_typed_error():
    transport, seen = scripted(*[(503, {"Retry-After": "0"})] * 3)
    with Client("http://test", transport=transport, retries=2) as client:
        with pytest.raises(NotReady) as info:
            client.search("q")
    assert len(seen) == 3 and info.value.retry_after_s == 0


def test_a_retry_after_past_the_deadline_or_the_cap_is_not_waited_for():
    transport, seen = scripted((429, {"Retry-After": "1"}))
    with Client("http://test", transport=transport, retries=3) as client:
        with pytest.raises(Overloaded) as info:
            client.search("q", deadline_ms=300)
    assert len(seen) == 1 and info.value.retry_after_s == 1
    transport, seen = scripted((429, {"Retry-After": "30"}))
    with Client("http://test", transport=transport, retries=3, max_retry_after_s=5) as client:
        with pytest.raises(Overloaded):
            client.search("q")
    assert len(seen) == 1


def test_a_retried_search_carries_what_is_left_of_its_deadline():
    transport, seen = scripted((429, {"Retry-After": "0.2"}))
    with Client("http://test", transport=transport) as client:
        client.search("q", deadline_ms=5000)
    assert seen[0]["deadline_ms"] <= 5000 and seen[1]["deadline_ms"] < seen[0]["deadline_ms"] - 150


def test_a_reply_that_does_not_come_is_a_timeout():
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("no reply", request=request)

    with Client("http://test", transport=httpx.MockTransport(handler), timeout_s=0.5) as client:
        with pytest.raises(Unavailable, match="no reply within"):
            client.search("q")


def test_bad_client_settings():
    for kwargs in ({"timeout_s": 0}, {"retries": -1}):
        with pytest.raises(ValueError):
            Client("http://127.0.0.1:1", **kwargs)
    with pytest.raises(ValueError, match="http"):
        Client("127.0.0.1:8000")


NOT_THE_API = [(b"<html>proxy error</html>", "text/html"), (b'{"question": 5, "hits": "no"}', "application/json"),
               (b"[1, 2]", "application/json"), (b'{"hits": [{"chunk_id": 1, "surprise": 2}]}', "application/json")]


@pytest.mark.parametrize("content,kind", NOT_THE_API)
def test_a_success_reply_that_is_not_the_apis_is_a_typed_error(content, kind):
    # a proxy's page or another service's JSON ended in a bare ValueError / TypeError / KeyError before
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=content,
                                                                   headers={"Content-Type": kind}))
    with Client("http://test", transport=transport) as client:
        for call in (lambda: client.search("q"), lambda: client.search_batch(["q"]), lambda: client.answer("q"),
                     lambda: list(client.stream_answer("q"))):
            with pytest.raises(BadResponse, match="not the medretrieve API's"):
                call()

    async def run_async():
        async with AsyncClient("http://test", transport=transport) as client:
            with pytest.raises(BadResponse):
                await client.search("q")
            with pytest.raises(BadResponse):
                await client.answer("q")

    asyncio.run(run_async())


def test_a_stream_cut_before_its_answer_is_unavailable():
    # the iterator ended quietly before, as if the answer had been empty
    cut = b'event: delta\ndata: {"text": "Metformin"}\n\n'
    transport = httpx.MockTransport(lambda request: httpx.Response(200, content=cut,
                                                                   headers={"Content-Type": "text/event-stream"}))
    with Client("http://test", transport=transport) as client:
        events = []
        with pytest.raises(Unavailable, match="ended before its answer"):
            for event in client.stream_answer("q"):
                events.append(event)
    assert [e.text for e in events] == ["Metformin"]


_OPTION_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-5, 700_000), st.floats(allow_nan=True),
                           st.sampled_from(["10", 10.0, 58.5, [1], {"a": 1}]))


@settings(max_examples=300, deadline=None)
@given(question=st.one_of(st.text(max_size=40), st.sampled_from([" ", "?!", "x" * 4000, "x" * 4001, QUESTION]),
                          st.integers()),
       k=_OPTION_VALUES, deadline_ms=_OPTION_VALUES, per_document=_OPTION_VALUES, explain=st.booleans())
def test_the_cheap_search_body_checks_as_the_server_model_does(question, k, deadline_ms, per_document, explain):
    """A search's body is checked by SearchOptions (once per option set) and WordedQuestion, not by SearchRequest
    each time: the same body, or the same refusal naming the same field, either way."""
    fields = client_module._search_fields(k, deadline_ms, per_document, None, explain, {})

    def outcome(make):
        try:
            return make()
        except InvalidRequest as exc:
            return (exc.field, exc.message)

    full = outcome(lambda: client_module._request(SearchRequest, question=question, **fields))
    assert outcome(lambda: client_module._search_body(question, fields)) == full
    assert outcome(lambda: client_module._search_body(question, fields)) == full  # the cached options too
