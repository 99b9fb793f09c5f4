"""The LlamaIndex retriever in real LlamaIndex (llama-index-core, pinned by the ``llamaindex`` extra): a
RetrieverQueryEngine with LlamaIndex's own MockLLM (which answers with the prompt it was given), over a local
Retriever and over a real ``medretrieve serve`` process through the sync and the async client."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("llama_index.core")

from llama_index.core.llms import MockLLM  # noqa: E402
from llama_index.core.query_engine import RetrieverQueryEngine  # noqa: E402
from llama_index.core.schema import MetadataMode, NodeWithScore  # noqa: E402

from medretrieve.client import AsyncClient, Client  # noqa: E402
from medretrieve.integrations.llamaindex import LlamaIndexRetriever  # noqa: E402
from recording_source import RecordingSource  # noqa: E402

QUESTION = "What is the first-line drug treatment for type 2 diabetes?"


def test_a_query_engine_answers_from_the_hits_of_a_local_retriever(medretrieve_retriever):
    expected = medretrieve_retriever.search(QUESTION, k=3, deadline_ms=None).hits
    retriever = LlamaIndexRetriever(medretrieve_retriever, k=3, deadline_ms=None)
    engine = RetrieverQueryEngine.from_args(retriever, llm=MockLLM())
    response = engine.query(QUESTION)
    assert [n.node.node_id for n in response.source_nodes] == [h.chunk_id for h in expected]
    assert all(h.text in str(response) for h in expected)  # MockLLM repeats its prompt: the context reached it
    assert f"title: {expected[0].title}" in str(response) and "chunk_id" not in str(response)

    top = response.source_nodes[0]
    assert isinstance(top, NodeWithScore) and top.score == pytest.approx(expected[0].score)
    assert top.node.ref_doc_id == expected[0].document_id == "demo-002"
    meta = top.node.metadata
    assert meta["section"] == expected[0].section and meta["chunk_id"] == expected[0].chunk_id
    assert expected[0].span is None and meta["offsetInEndSection"] is None  # the demo's source gives no layout
    llm_view = top.node.get_content(metadata_mode=MetadataMode.LLM)
    assert "source_url" not in llm_view and "offsetInBeginSection" not in llm_view  # None and bookkeeping hidden


def test_which_stage_placed_a_hit_stays_in_metadata_not_in_the_prompt(medretrieve_retriever):
    # issue 44: placed_by is how the list was made (bookkeeping), not evidence for the LLM or an embedder
    from dataclasses import replace

    class Recovered:
        def search(self, question, **options):
            result = medretrieve_retriever.search(question, **options)
            return replace(result, hits=[replace(h, placed_by="recovery") for h in result.hits])

    node = LlamaIndexRetriever(Recovered(), k=2, deadline_ms=None).retrieve(QUESTION)[0].node
    assert node.metadata["placed_by"] == "recovery"
    for mode in (MetadataMode.LLM, MetadataMode.EMBED):
        shown = node.get_content(metadata_mode=mode)
        assert "placed_by" not in shown and "recovery" not in shown and f"title: {node.metadata['title']}" in shown
    assert "placed_by" in node.get_content(metadata_mode=MetadataMode.ALL)


def test_k_deadline_and_sections_reach_the_search(medretrieve_retriever):
    source = RecordingSource(medretrieve_retriever)
    retriever = LlamaIndexRetriever(source, k=2, deadline_ms=60000.0, sections=["diagnosis"])
    nodes = retriever.retrieve(QUESTION)
    retriever.k, retriever.sections, retriever.deadline_ms = 1, None, None
    asyncio.run(retriever.aretrieve(QUESTION))
    assert [(c["k"], c["deadline_ms"], c.get("sections")) for c in source.calls] == [
        (2, 60000.0, ["diagnosis"]), (1, None, None)]
    expected = medretrieve_retriever.search(QUESTION, k=2, deadline_ms=None, sections=["diagnosis"]).hits
    assert [n.node.node_id for n in nodes] == [h.chunk_id for h in expected]


def test_every_declared_option_reaches_the_search(medretrieve_retriever):
    source = RecordingSource(medretrieve_retriever)
    options = {"k": 3, "per_document": 1, "mmr": True, "recovery": False}
    nodes = LlamaIndexRetriever(source, deadline_ms=None, **options).retrieve(QUESTION)
    assert source.calls == [{"question": QUESTION, "deadline_ms": None, **options}]
    expected = medretrieve_retriever.search(QUESTION, deadline_ms=None, **options)
    assert [n.node.node_id for n in nodes] == [h.chunk_id for h in expected.hits]


@pytest.mark.parametrize("bad,error,says", [
    ({"k": "5"}, TypeError, "k must be an integer"), ({"k": True}, TypeError, "k must be an integer"),
    ({"deadline_ms": "300"}, TypeError, "deadline_ms must be a number"), ({"k": 101}, ValueError, "k must be in"),
    ({"per_documnt": 1}, TypeError, "per_documnt"), ({"sections": "treatment"}, TypeError, "sections")])
def test_options_are_refused_as_the_http_api_refuses_them_over_a_folder_and_a_url(medretrieve_collection, server,
                                                                                   bad, error, says):
    for source in (str(medretrieve_collection.directory), server.url):
        with pytest.raises(error, match=says):
            LlamaIndexRetriever(source, **bad)
    retriever = LlamaIndexRetriever(server.url)
    retriever.k = "5"  # an attribute changed later is checked at the next query, before anything is sent
    with pytest.raises(TypeError, match="k must be an integer"):
        retriever.retrieve(QUESTION)
    retriever.close()


def test_over_a_server_sync_and_async(server, medretrieve_retriever):
    expected = [h.chunk_id for h in medretrieve_retriever.search(QUESTION, k=3, deadline_ms=60000).hits]
    with Client(server.url) as client:
        retriever = LlamaIndexRetriever(client, k=3, deadline_ms=60000)
        assert [n.node.node_id for n in retriever.retrieve(QUESTION)] == expected

    async def query_over_async_client():
        async with AsyncClient(server.url) as client:
            engine = RetrieverQueryEngine.from_args(LlamaIndexRetriever(client, k=3, deadline_ms=60000),
                                                    llm=MockLLM())
            return await engine.aquery(QUESTION)

    response = asyncio.run(query_over_async_client())
    assert [n.node.node_id for n in response.source_nodes] == expected
    assert response.source_nodes[0].node.text in str(response)
