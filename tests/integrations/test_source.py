"""The part every integration shares: what a hit becomes as document metadata, and the search door (local,
client, async client, folder or URL) with its options."""
from __future__ import annotations

import asyncio

import pytest

from medretrieve.integrations.source import SearchCall, Searcher, hit_metadata, source_url
from medretrieve.retrieval.results import Hit
from recording_source import RecordingSource

QUESTION = "What is the first-line drug treatment for type 2 diabetes?"


def _hit(document_id: str, **extra) -> Hit:
    span = {"beginSection": "abstract", "endSection": "abstract", "offsetInBeginSection": 12,
            "offsetInEndSection": 40}
    return Hit(chunk_id=f"{document_id}#s0.0", document_id=document_id, text="Metformin is first-line.",
               title="Diabetes", section="Treatment", score=0.75, scores={"dense": 0.5, "rerank": 0.75},
               metadata=dict(extra), parent_id=f"{document_id}#s0", span=span)


def test_hit_metadata_holds_the_hit_and_links_pubmed_ids():
    meta = hit_metadata(_hit("28293123", year=2017, title="the collection's own title loses"))
    assert meta == {"year": 2017, "document_id": "28293123", "chunk_id": "28293123#s0.0",
                    "parent_id": "28293123#s0", "title": "Diabetes", "section": "Treatment", "score": 0.75,
                    "scores": {"dense": 0.5, "rerank": 0.75}, "placed_by": None,
                    "source_url": "https://pubmed.ncbi.nlm.nih.gov/28293123/",
                    "beginSection": "abstract", "endSection": "abstract", "offsetInBeginSection": 12,
                    "offsetInEndSection": 40}


def test_source_url_prefers_the_documents_own_link_and_knows_none_for_other_ids():
    assert source_url("demo-002") is None
    assert source_url("demo-002", {"url": "https://example.org/a"}) == "https://example.org/a"
    assert source_url("123", {"url": "not a link"}) == "https://pubmed.ncbi.nlm.nih.gov/123/"
    no_span = _hit("demo-002")
    no_span.span = None
    assert hit_metadata(no_span)["offsetInBeginSection"] is None


def test_search_call_overrides_and_refuses_unknown_options():
    call = SearchCall.of(300.0, k=10).with_overrides({"k": 3, "sections": ("treatment",)})
    assert call.kwargs() == {"k": 3, "deadline_ms": 300.0, "sections": ["treatment"]}
    assert SearchCall.of(None, k=3, mmr=True).with_overrides({"mmr": None}).kwargs() == {"k": 3, "deadline_ms": None}
    with pytest.raises(TypeError, match="unknown search option top;"):
        SearchCall.of(None, k=10).with_overrides({"top": 3})
    with pytest.raises(TypeError, match="k must be an integer"):
        SearchCall.of(None, k="3")


def test_searcher_passes_the_options_and_serves_async_from_a_thread(medretrieve_retriever):
    source = RecordingSource(medretrieve_retriever)
    searcher = Searcher(source)
    call = SearchCall.of(None, k=2, sections=["treatment"])
    sync = searcher.search(QUESTION, call)
    awaited = asyncio.run(searcher.asearch(QUESTION, call))
    assert [h.chunk_id for h in sync.hits] == [h.chunk_id for h in awaited.hits]
    assert len(sync.hits) == 2
    assert source.calls == [{"question": QUESTION, "k": 2, "deadline_ms": None, "sections": ["treatment"]}] * 2


def test_searcher_opens_a_folder_and_refuses_what_cannot_search(medretrieve_collection, tmp_path):
    opened = Searcher(str(medretrieve_collection.directory))
    assert opened.search(QUESTION, SearchCall.of(None, k=1)).hits[0].document_id == "demo-002"
    with pytest.raises(TypeError, match="source must be a medretrieve Retriever, Client or AsyncClient"):
        Searcher(42)
    with pytest.raises(FileNotFoundError, match="is not a medretrieve collection"):
        Searcher(tmp_path)


def test_an_async_client_serves_only_async_calls(server):
    from medretrieve.client import AsyncClient

    async def both():
        async with AsyncClient(server.url) as client:
            searcher = Searcher(client)
            with pytest.raises(TypeError, match="answers only the async calls"):
                searcher.search(QUESTION, SearchCall.of(None, k=1))
            return await searcher.asearch(QUESTION, SearchCall.of(60000.0, k=1))

    assert asyncio.run(both()).hits[0].document_id == "demo-002"
