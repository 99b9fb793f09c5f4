"""The Haystack component in real Haystack (haystack-ai 2.x components API, pinned by the ``haystack`` extra): a
RAG Pipeline (retriever -> ChatPromptBuilder -> Haystack's MockChatGenerator, which echoes the prompt), over a
local Retriever and over a real ``medretrieve serve`` process through the sync and the async client (run_async);
the pipeline's YAML round trip."""
from __future__ import annotations

import asyncio
import os

import pytest

os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")  # offline: no usage statistics
pytest.importorskip("haystack")

from haystack import Document, Pipeline  # noqa: E402
from haystack.components.builders import ChatPromptBuilder  # noqa: E402
from haystack.components.generators.chat import MockChatGenerator  # noqa: E402
from haystack.dataclasses import ChatMessage  # noqa: E402

from medretrieve.client import AsyncClient, Client  # noqa: E402
from medretrieve.integrations.haystack import HaystackRetriever  # noqa: E402
from recording_source import RecordingSource  # noqa: E402

QUESTION = "What is the first-line drug treatment for type 2 diabetes?"
TEMPLATE = [ChatMessage.from_user("Sources:\n{% for d in documents %}[{{ loop.index }}] {{ d.meta.title }}: "
                                  "{{ d.content }}\n{% endfor %}Question: {{ query }}")]


def _rag(retriever: HaystackRetriever) -> Pipeline:
    rag = Pipeline()
    rag.add_component("retriever", retriever)
    rag.add_component("prompt", ChatPromptBuilder(template=TEMPLATE, required_variables=["documents", "query"]))
    rag.add_component("llm", MockChatGenerator())  # echoes the prompt it was given
    rag.connect("retriever.documents", "prompt.documents")
    rag.connect("prompt.prompt", "llm.messages")
    return rag


def _inputs(question: str, **retriever_inputs) -> dict:
    return {"retriever": {"query": question, **retriever_inputs}, "prompt": {"query": question}}


def test_a_rag_pipeline_reads_the_hits_of_a_local_retriever(medretrieve_retriever):
    expected = medretrieve_retriever.search(QUESTION, k=3, deadline_ms=None).hits
    rag = _rag(HaystackRetriever(medretrieve_retriever, k=3, deadline_ms=None))
    out = rag.run(_inputs(QUESTION), include_outputs_from={"retriever"})
    reply = out["llm"]["replies"][0].text
    assert f"[1] {expected[0].title}: {expected[0].text}" in reply and all(h.text in reply for h in expected)
    docs = out["retriever"]["documents"]
    assert all(isinstance(d, Document) for d in docs)
    assert [d.id for d in docs] == [h.chunk_id for h in expected]
    top, hit = docs[0], expected[0]
    assert top.content == hit.text and top.score == pytest.approx(hit.score)
    assert top.meta["document_id"] == "demo-002" and top.meta["section"] == hit.section
    assert hit.span is None and top.meta["offsetInBeginSection"] is None  # the demo's source gives no layout


def test_top_k_sections_and_deadline_reach_the_search(medretrieve_retriever):
    source = RecordingSource(medretrieve_retriever)
    retriever = HaystackRetriever(source, k=4, deadline_ms=60000.0, sections=["treatment"])
    docs = retriever.run(QUESTION, top_k=2, sections=["diagnosis"])["documents"]
    asyncio.run(retriever.run_async(QUESTION))
    assert [(c["k"], c["deadline_ms"], c["sections"]) for c in source.calls] == [
        (2, 60000.0, ["diagnosis"]), (4, 60000.0, ["treatment"])]
    expected = medretrieve_retriever.search(QUESTION, k=2, deadline_ms=None, sections=["diagnosis"]).hits
    assert [d.id for d in docs] == [h.chunk_id for h in expected]
    with pytest.raises(ValueError, match="astrology"):
        retriever.run(QUESTION, sections=["astrology"])


@pytest.mark.parametrize("bad,error,says", [
    ({"k": "5"}, TypeError, "k must be an integer"), ({"k": True}, TypeError, "k must be an integer"),
    ({"deadline_ms": "300"}, TypeError, "deadline_ms must be a number"), ({"k": 0}, ValueError, "k must be in"),
    ({"per_documnt": 1}, TypeError, "per_documnt"), ({"feedback": "yes"}, TypeError, "feedback")])
def test_options_are_refused_as_the_http_api_refuses_them_over_a_folder_and_a_url(medretrieve_collection, server,
                                                                                   bad, error, says):
    for source in (str(medretrieve_collection.directory), server.url):
        with pytest.raises(error, match=says):
            HaystackRetriever(source, **bad)
    retriever = HaystackRetriever(server.url)
    with pytest.raises(TypeError, match="k must be an integer"):
        retriever.run(QUESTION, top_k="5")
    retriever.close()


def test_over_a_server_sync_and_async(server, medretrieve_retriever):
    expected = [h.chunk_id for h in medretrieve_retriever.search(QUESTION, k=3, deadline_ms=60000).hits]
    with Client(server.url) as client:
        out = _rag(HaystackRetriever(client, k=3, deadline_ms=60000)).run(_inputs(QUESTION),
                                                                        include_outputs_from={"retriever"})
        assert [d.id for d in out["retriever"]["documents"]] == expected

    async def rag_over_async_client():
        async with AsyncClient(server.url) as client:
            rag = _rag(HaystackRetriever(client, k=3, deadline_ms=60000))
            return await rag.run_async(_inputs(QUESTION), include_outputs_from={"retriever"})

    out = asyncio.run(rag_over_async_client())
    assert [d.id for d in out["retriever"]["documents"]] == expected
    assert out["retriever"]["documents"][0].content in out["llm"]["replies"][0].text


def test_the_pipeline_round_trips_through_yaml_when_built_from_a_folder(medretrieve_collection,
                                                                       medretrieve_retriever):
    folder = str(medretrieve_collection.directory)
    yaml = _rag(HaystackRetriever(folder, k=2, deadline_ms=None, sections=["treatment"], mmr=True)).dumps()
    loaded = Pipeline.loads(yaml, allowed_modules=["medretrieve.integrations.haystack"])
    retriever = loaded.get_component("retriever")
    assert retriever.call.deadline_ms is None
    assert retriever.call.options == {"k": 2, "sections": ["treatment"], "mmr": True}
    docs = loaded.run(_inputs(QUESTION), include_outputs_from={"retriever"})["retriever"]["documents"]
    expected = medretrieve_retriever.search(QUESTION, k=2, deadline_ms=None, sections=["treatment"], mmr=True).hits
    assert [d.id for d in docs] == [h.chunk_id for h in expected]
    with pytest.raises(TypeError, match="serialises only when built from a collection folder or a server URL"):
        _rag(HaystackRetriever(medretrieve_retriever)).dumps()
