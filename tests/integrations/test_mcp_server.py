"""``medretrieve mcp`` through the official MCP Python SDK's own client: started as a real subprocess over stdio
(tools/list, both tools, a refused argument), once over streamable HTTP, and in process over a real
``medretrieve serve`` (answers written by that server's LLM)."""
from __future__ import annotations

import asyncio
import os
import socket
import sys
import time

import pytest

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402
from mcp_process import mcp_http  # noqa: E402

from medretrieve.generation.generate import SOURCE_FLOOR  # noqa: E402
from medretrieve.integrations.mcp_server import Engine, build_server  # noqa: E402
from medretrieve.wire import SEARCH_OPTIONS  # noqa: E402

QUESTION = "What is the first-line drug treatment for type 2 diabetes?"
TIMEOUT_S = 120.0  # the longest one MCP session of a test may take, start-up included


def _stdio(collection_dir, *args: str) -> StdioServerParameters:
    return StdioServerParameters(command=sys.executable, args=["-m", "medretrieve", "mcp", str(collection_dir), *args],
                                 env=dict(os.environ))  # the checkout's PYTHONPATH / core build and the test cache


async def _session(target, work):
    async with Client(target, read_timeout_seconds=60) as client:
        return await asyncio.wait_for(work(client), TIMEOUT_S)


async def _list_and_call(client):
    tools = {t.name: t for t in (await client.list_tools()).tools}
    found = await client.call_tool("search", {"question": QUESTION, "k": 3, "sections": ["treatment"]})
    answered = await client.call_tool("answer", {"question": QUESTION, "k": 3})
    refused = await client.call_tool("search", {"question": QUESTION, "sections": ["astrology"]})
    return tools, found, answered, refused


def test_stdio_server_lists_both_tools_and_answers_them(medretrieve_collection, medretrieve_retriever):
    tools, found, answered, refused = asyncio.run(_session(_stdio(medretrieve_collection.directory),
                                                           _list_and_call))
    assert set(tools) == {"search", "answer"}
    search_tool = tools["search"]
    # the fields of POST /v1/search but explain: the search declaration's options, stage switches under stages
    assert set(search_tool.input_schema["properties"]) == {
        "question", "stages", *(name for name, option in SEARCH_OPTIONS.items() if not option.stage)}
    assert search_tool.input_schema["required"] == ["question"]
    assert {"hits", "weak", "cut"} <= set(search_tool.output_schema["properties"])
    assert {"text", "citations", "sources"} <= set(tools["answer"].output_schema["properties"])
    assert search_tool.annotations.read_only_hint

    assert not found.is_error
    expected = medretrieve_retriever.search(QUESTION, k=3, deadline_ms=None, sections=["treatment"]).hits
    hits = found.structured_content["hits"]
    assert [h["chunk_id"] for h in hits] == [h.chunk_id for h in expected]
    assert [h["number"] for h in hits] == [1, 2, 3]
    assert hits[0]["text"] == expected[0].text and hits[0]["document_id"] == "demo-002"
    assert expected[0].span is None and hits[0]["span"] is None  # the demo's documents are no abstracts
    assert hits[0]["score"] == pytest.approx(expected[0].score)

    assert not answered.is_error
    ans = answered.structured_content
    assert not ans["abstained"] and ans["error"] is None and "Metformin" in ans["text"]
    assert ans["citations"] and all(c["supported"] for c in ans["citations"])
    numbers = {n for c in ans["citations"] for n in c["sources"]}
    assert numbers <= {s["number"] for s in ans["sources"]}  # every [n] points at a source it returned
    assert any(s["document_id"] == "demo-002" for s in ans["sources"] if s["number"] in numbers)
    assert "extractive answer" in " ".join(ans["notes"])

    assert refused.is_error and "sections.0" in refused.content[0].text  # the input schema lists the categories
    assert "treatment" in str(search_tool.input_schema["properties"]["sections"])


def test_streamable_http_transport(medretrieve_collection):
    from medretrieve.server.config import CONFIG_ENV, ServerConfig

    # the header deadline of medretrieve serve's protocol, short so that the test takes a second
    env = {**os.environ, CONFIG_ENV: ServerConfig("", header_timeout_s=1.0).to_json()}
    with mcp_http(medretrieve_collection.directory, start_s=TIMEOUT_S, env=env) as url:
        async def work(client):
            tools = [t.name for t in (await client.list_tools()).tools]
            return tools, await client.call_tool("search", {"question": QUESTION, "k": 2})

        tools, found = asyncio.run(_session(url, work))
        assert sorted(tools) == ["answer", "search"]
        assert [h["number"] for h in found.structured_content["hits"]] == [1, 2]
        # a client that trickles its headers is answered 408 and closed (held open for ever before)
        host, port = url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(b"POST /mcp HTTP/1.1\r\nHost: t\r\n")
            t0 = time.monotonic()
            reply = sock.recv(4096)
        assert reply.startswith(b"HTTP/1.1 408") and b"request_timeout" in reply and time.monotonic() - t0 < 5


def test_over_a_medretrieve_server_the_answer_comes_from_its_llm(server):
    from medretrieve.client import Client as HttpClient

    from conftest import CITED_ANSWER

    with HttpClient(server.url) as http:
        engine = Engine(http, deadline_ms=60000)
        tools, found, answered, refused = asyncio.run(_session(build_server(engine), _list_and_call))
    assert not found.is_error and found.structured_content["hits"][0]["document_id"] == "demo-002"
    assert answered.structured_content["text"] == "".join(CITED_ANSWER)  # the fake LLM behind the server
    assert answered.structured_content["citations"][0]["sources"] == [1]
    assert refused.is_error and "sections" in refused.content[0].text
    with pytest.raises(ValueError, match="answers with the LLM it was started with"):
        Engine(server.url, backend=object())


def test_answer_lists_the_sources_worth_showing_as_the_server_does(server):
    # issue 44: the answer tool listed every source read (a Hypertension passage for a diabetes question); now the
    # same set as POST /v1/answer's shown_sources (cited, or at least the relevance floor), all on request
    from medretrieve.client import Client as HttpClient

    async def work(client):
        listed = {t.name: t for t in (await client.list_tools()).tools}["answer"].input_schema
        calls = [await client.call_tool("answer", {"question": QUESTION, "k": 5, **more})
                 for more in ({}, {"all_sources": False}, {"all_sources": True}, {"all_sources": "yes"})]
        return listed, calls

    with HttpClient(server.url) as http:
        over_http = http.answer(QUESTION, k=5)
        listed, (shown, same, every, refused) = asyncio.run(
            _session(build_server(Engine(http, deadline_ms=60000)), work))
    assert listed["properties"]["all_sources"] == {**listed["properties"]["all_sources"], "type": "boolean",
                                                   "default": False}
    read = len(over_http.evidence)
    assert 1 in over_http.shown_sources and len(over_http.shown_sources) < read  # the check below can fail
    assert [s["number"] for s in shown.structured_content["sources"]] == over_http.shown_sources
    assert shown.structured_content["more_sources"] == read - len(over_http.shown_sources)
    assert same.structured_content == shown.structured_content
    assert [s["number"] for s in every.structured_content["sources"]] == list(range(1, read + 1))
    assert every.structured_content["more_sources"] == 0
    assert [s["chunk_id"] for s in every.structured_content["sources"]] == [h.chunk_id for h in over_http.evidence]
    assert refused.is_error and "all_sources must be true or false" in refused.content[0].text


def test_stdio_server_answers_with_the_llm_it_was_started_with(medretrieve_collection, fake_llm):
    from conftest import CITED_ANSWER

    params = _stdio(medretrieve_collection.directory, "--llm", fake_llm.base_url, "--model", "fake-model")

    async def work(client):
        return await client.call_tool("answer", {"question": QUESTION, "k": 2})

    answered = asyncio.run(_session(params, work)).structured_content
    assert answered["text"] == "".join(CITED_ANSWER) and not answered["abstained"]
    assert answered["citations"][0]["sources"] == [1] and answered["citations"][0]["supported"]
    # the cited source and any other at least at the relevance floor; the rest counted, listed on request
    assert answered["sources"][0]["document_id"] == "demo-002" and answered["sources"][0]["number"] == 1
    assert all(s["number"] == 1 or s["score"] >= SOURCE_FLOOR for s in answered["sources"])
    assert len(answered["sources"]) + answered["more_sources"] == 2
    assert not any("extractive" in note for note in answered["notes"])


@pytest.mark.parametrize("tool", ["search", "answer"])
@pytest.mark.parametrize("question,says", [
    ("metformin " * 100_000, "at most 4000 characters"),  # 1 MB: searched for 2.5 s past a 300 ms deadline before
    ("?!.", "must hold a word"),  # searched and answered before; the HTTP API refuses both
])
def test_a_question_the_http_api_refuses_is_refused_by_the_tools(medretrieve_retriever, tool, question, says):
    engine = Engine(medretrieve_retriever, deadline_ms=300)

    async def work(client):
        return await client.call_tool(tool, {"question": question})

    refused = asyncio.run(_session(build_server(engine), work))
    assert refused.is_error and says in refused.content[0].text
    # the word rule is checked by the tools, not published as a ~300-character Unicode-range pattern
    assert "pattern" not in str(asyncio.run(_session(build_server(engine), _listed_question_schema)))


async def _listed_question_schema(client):
    return {t.name: t.input_schema["properties"]["question"] for t in (await client.list_tools()).tools}


@pytest.mark.parametrize("k,says", [("3", "valid integer"), (True, "valid integer"), (3.5, "valid integer")])
def test_k_is_a_whole_number_as_over_http(medretrieve_retriever, k, says):
    # "3" and true were taken as 3 and 1 hits before; the HTTP API refuses both
    async def work(client):
        return await client.call_tool("search", {"question": QUESTION, "k": k}), \
            await client.call_tool("search", {"question": QUESTION, "k": 2.0})

    refused, whole = asyncio.run(_session(build_server(Engine(medretrieve_retriever)), work))
    assert refused.is_error and says in refused.content[0].text
    assert not whole.is_error and len(whole.structured_content["hits"]) == 2
