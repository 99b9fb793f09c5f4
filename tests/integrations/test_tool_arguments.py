"""The MCP tools' arguments are the search declaration's (medretrieve.wire.SEARCH_OPTIONS), through the SDK's own
client: published in standard JSON Schema keywords, checked as the HTTP API checks a request body (no coercion,
an unknown or misspelt argument refused naming it), every option reaching the search; a result is its structured
content beside a short plain-text summary, not the same content again as JSON text."""
from __future__ import annotations

import asyncio
import json

import pytest

pytest.importorskip("mcp")

from mcp import Client  # noqa: E402

from medretrieve.integrations.mcp_server import Engine, build_server  # noqa: E402
from medretrieve.wire import SEARCH_OPTIONS  # noqa: E402

QUESTION = "What is the first-line drug treatment for type 2 diabetes?"
TIMEOUT_S = 120.0


def _run(engine, work, **server_options):
    async def session():
        async with Client(build_server(engine, **server_options), read_timeout_seconds=60) as client:
            return await asyncio.wait_for(work(client), TIMEOUT_S)

    return asyncio.run(session())


def _keys(schema):
    """Every key used anywhere in a JSON schema."""
    if isinstance(schema, dict):
        return set(schema) | {k for v in schema.values() for k in _keys(v)}
    if isinstance(schema, list):
        return {k for v in schema for k in _keys(v)}
    return set()


def test_the_published_input_schemas_are_built_from_the_declaration(medretrieve_retriever):
    jsonschema_rs = pytest.importorskip("jsonschema_rs")

    async def work(client):
        return {t.name: t.input_schema for t in (await client.list_tools()).tools}

    schemas = _run(Engine(medretrieve_retriever), work, default_k=4)
    search, answer = schemas["search"], schemas["answer"]
    for name, option in SEARCH_OPTIONS.items():
        listed = search["properties"]["stages"]["properties"][name] if option.stage else search["properties"][name]
        declared = option.json_schema()
        if name == "k":
            declared["default"] = 4  # the server's --k
        assert {key: value for key, value in listed.items() if key != "description"} == \
               {key: value for key, value in declared.items() if key != "description"}
    assert search["properties"]["k"]["minimum"] == 1 and search["properties"]["k"]["maximum"] == 100
    assert answer["properties"]["k"]["maximum"] == 100 and answer["properties"]["k"]["default"] == 4
    for schema in (search, answer):
        # standard keywords only (ge/le are pydantic's), no pattern for the question, unknown names refused
        assert not _keys(schema) & {"ge", "le", "gt", "lt", "pattern"}
        assert schema["additionalProperties"] is False and schema["required"] == ["question"]
    check = jsonschema_rs.validator_for(search)
    assert check.is_valid({"question": QUESTION, "k": 3, "stages": {"mmr": True}})
    for bad in ({"question": QUESTION, "k": "3"}, {"question": QUESTION, "section": ["diagnosis"]},
                {"question": QUESTION, "stages": {"lexical": False}}, {"question": QUESTION, "k": 0}):
        assert not check.is_valid(bad)


@pytest.mark.parametrize("arguments,says", [
    ({"section": ["diagnosis"]}, "section: unknown"),  # a typo of sections: was dropped, five Treatment hits came back
    ({"explain": True}, "explain: unknown"),
    ({"mmr": True}, "mmr: unknown"),  # a stage switch goes in stages, as over HTTP
    ({"stages": {"lexical": False}}, "stages.lexical"),  # the old name of bm25
    ({"k": "3"}, "k"), ({"k": True}, "k"), ({"k": 101}, "k"),
    ({"sections": '["treatment"]'}, "sections"),  # a JSON string is no list (the SDK parsed it into one)
    ({"deadline_ms": "300"}, "deadline_ms"), ({"stages": {"mmr": "true"}}, "stages.mmr"),
    ({"stages": {"dense": False, "bm25": False}}, "bm25"),
])
def test_arguments_the_http_api_refuses_are_refused_naming_them(medretrieve_retriever, arguments, says):
    async def work(client):
        return await client.call_tool("search", {"question": QUESTION, **arguments})

    refused = _run(Engine(medretrieve_retriever), work)
    assert refused.is_error and says in refused.content[0].text


def test_answer_takes_only_its_own_arguments(medretrieve_retriever):
    async def work(client):
        return await client.call_tool("answer", {"question": QUESTION, "sections": ["treatment"]}), \
            await client.call_tool("answer", {"question": QUESTION, "k": "2"})

    unknown, coerced = _run(Engine(medretrieve_retriever), work)
    assert unknown.is_error and "sections: unknown" in unknown.content[0].text
    assert coerced.is_error and "k" in coerced.content[0].text


def test_every_option_reaches_the_search_and_a_bare_question_searches_as_python(medretrieve_retriever):
    arguments = {"k": 3, "per_document": 1, "sections": ["treatment", "background"],
                 "stages": {"mmr": True, "bm25": False, "recovery": False}}

    async def work(client):
        return await client.call_tool("search", {"question": QUESTION, "deadline_ms": 60000, **arguments}), \
            await client.call_tool("search", {"question": QUESTION, "deadline_ms": 60000})

    found, bare = _run(Engine(medretrieve_retriever), work)
    for got, want in ((found, medretrieve_retriever.search(QUESTION, deadline_ms=None, k=3, per_document=1,
                                                           sections=["treatment", "background"], mmr=True,
                                                           bm25=False, recovery=False)),
                      (bare, medretrieve_retriever.search(QUESTION, deadline_ms=None))):
        assert not got.is_error
        out = got.structured_content
        assert [h["chunk_id"] for h in out["hits"]] == [h.chunk_id for h in want.hits]
        assert [h["score"] for h in out["hits"]] == pytest.approx([h.score for h in want.hits])
        assert [(s["name"], s["ran"]) for s in out["stages"]] == [(s.name, s.ran) for s in want.stages]
    ran = [{s["name"]: s["ran"] for s in result.structured_content["stages"]} for result in (found, bare)]
    assert (ran[0]["bm25"], ran[1]["bm25"]) == (False, True)  # the switch reached the search


def test_a_result_is_its_structured_content_and_a_short_summary(medretrieve_retriever):
    async def work(client):
        return await client.call_tool("search", {"question": QUESTION, "k": 3}), \
            await client.call_tool("answer", {"question": QUESTION, "k": 2})

    found, answered = _run(Engine(medretrieve_retriever), work)
    for result in (found, answered):
        assert [c.type for c in result.content] == ["text"]
        text = result.content[0].text
        with pytest.raises(json.JSONDecodeError):  # the pretty-printed structured result came back as text before
            json.loads(text)
        assert len(text) < len(json.dumps(result.structured_content)) / 2
    hits = found.structured_content["hits"]
    assert found.content[0].text.startswith("3 passages") and all(h["title"] in found.content[0].text for h in hits)
    assert answered.content[0].text == answered.structured_content["text"]
