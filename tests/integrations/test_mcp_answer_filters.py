"""The MCP ``answer`` tool with the search's filter options (issue 45), through the SDK's own client: published as
the ``search`` tool publishes them (the search declaration), checked as over HTTP (a tool error naming the
option), reaching the evidence's search over a local collection and over a ``medretrieve serve``; each source
listed carries its document's year and publication types where recorded (the search tool's hits too)."""
from __future__ import annotations

import asyncio

import pytest
from medline_collection import QUESTION, build_medline_collection

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402

from medretrieve.corpus.collection import Collection  # noqa: E402
from medretrieve.integrations.mcp_server import Engine, build_server  # noqa: E402
from medretrieve.retrieval.retriever import Retriever  # noqa: E402
from medretrieve.wire import FILTER_OPTIONS  # noqa: E402

TIMEOUT_S = 120.0


@pytest.fixture(scope="module")
def medline_dir(tmp_path_factory):
    out = build_medline_collection(tmp_path_factory)
    return out


def _run(engine, work):
    async def session():
        async with Client(build_server(engine), read_timeout_seconds=60) as client:
            return await asyncio.wait_for(work(client), TIMEOUT_S)

    return asyncio.run(session())


def _calls(*arguments):
    async def work(client):
        return [await client.call_tool(name, args) for name, args in arguments]
    return work


def test_the_answer_tool_publishes_the_filter_options_as_search_does(medline_dir):
    async def work(client):
        return {t.name: t.input_schema for t in (await client.list_tools()).tools}

    schemas = _run(Engine(Retriever(Collection.open(medline_dir))), work)
    for name in FILTER_OPTIONS:
        assert schemas["answer"]["properties"][name] == schemas["search"]["properties"][name]


def test_a_filtered_answer_lists_only_passing_sources_with_year_and_type(medline_dir):
    retriever = Retriever(Collection.open(medline_dir))
    answered, every, found = _run(Engine(retriever), _calls(
        ("answer", {"question": QUESTION, "k": 10, "where": "year >= 2021", "all_sources": True}),
        ("answer", {"question": QUESTION, "k": 10, "include_retracted": True, "evidence_prior": True,
                    "all_sources": True}),
        ("search", {"question": QUESTION, "k": 10, "include_retracted": True})))
    assert not answered.is_error, answered.content
    sources = answered.structured_content["sources"]
    assert sources and answered.structured_content["citations"]
    assert all(s["year"] >= 2021 and s["publication_type"] for s in sources)
    listed = every.structured_content["sources"]
    assert any(s["year"] < 2021 for s in listed if s["year"] is not None)  # the filter had something to drop
    assert listed[0]["publication_type"] == ["Practice Guideline"]  # the evidence prior reached the search
    expected = retriever.search(QUESTION, k=10, deadline_ms=None, include_retracted=True).hits
    for hit, shown in zip(expected, found.structured_content["hits"]):
        assert shown["year"] == hit.metadata.get("year")
        assert shown["publication_type"] == hit.metadata.get("publication_type")


@pytest.mark.parametrize("arguments, says", [
    ({"where": "year >"}, "where"), ({"where": 2015}, "where"), ({"where": "yeer >= 2015"}, "unknown field 'yeer'"),
    ({"include_retracted": "yes"}, "include_retracted"), ({"recency_half_life": 0}, "recency_half_life"),
])
def test_a_bad_filter_option_is_a_tool_error_naming_it(medline_dir, arguments, says):
    refused, = _run(Engine(Retriever(Collection.open(medline_dir))),
                    _calls(("answer", {"question": QUESTION, **arguments})))
    assert refused.is_error and says in refused.content[0].text


def test_over_a_server_the_filter_reaches_its_answer(medline_dir):
    pytest.importorskip("fastapi")
    from medretrieve.testing.server import ServerProcess

    with ServerProcess(medline_dir, ["--deadline-ms", "60000"]) as srv:
        answered, refused = _run(Engine(srv.url, answer_deadline_ms=60000), _calls(
            ("answer", {"question": QUESTION, "k": 10, "where": "year >= 2021", "all_sources": True}),
            ("answer", {"question": QUESTION, "where": "yeer >= 2015"})))
    assert not answered.is_error, answered.content
    sources = answered.structured_content["sources"]
    assert sources and all(s["year"] >= 2021 for s in sources)
    assert refused.is_error and "unknown field 'yeer'" in refused.content[0].text
