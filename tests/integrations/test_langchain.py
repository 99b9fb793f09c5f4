"""The LangChain retriever in real LangChain (langchain-core, pinned by the ``langchain`` extra): an LCEL RAG
chain with LangChain's own fake chat model, over a local Retriever and over a real ``medretrieve serve`` process
through the sync and the async client."""
from __future__ import annotations

import asyncio

import pytest

pytest.importorskip("langchain_core")

from langchain_core.callbacks import BaseCallbackHandler  # noqa: E402
from langchain_core.documents import Document  # noqa: E402
from langchain_core.language_models.fake_chat_models import FakeListChatModel  # noqa: E402
from langchain_core.output_parsers import StrOutputParser  # noqa: E402
from langchain_core.prompts import ChatPromptTemplate  # noqa: E402
from langchain_core.runnables import RunnablePassthrough  # noqa: E402

from medretrieve.client import AsyncClient, Client  # noqa: E402
from medretrieve.integrations.langchain import LangChainRetriever  # noqa: E402
from recording_source import RecordingSource  # noqa: E402

QUESTION = "What is the first-line drug treatment for type 2 diabetes?"
PROMPT = ChatPromptTemplate.from_messages([("system", "Answer from these sources only:\n{context}"),
                                           ("human", "{question}")])


class PromptRecorder(BaseCallbackHandler):
    """What the chat model was asked (LangChain's callback protocol)."""

    def __init__(self) -> None:
        self.prompts: list = []

    def on_chat_model_start(self, serialized, messages, **kwargs):
        self.prompts.extend(m.content for batch in messages for m in batch)


def _rag_chain(retriever, reply: str):
    def sources(docs):
        return "\n".join(f"[{n}] {d.metadata['title']} ({d.metadata['section']}): {d.page_content}"
                         for n, d in enumerate(docs, 1))

    return ({"context": retriever | sources, "question": RunnablePassthrough()} | PROMPT
            | FakeListChatModel(responses=[reply]) | StrOutputParser())


def test_an_lcel_chain_reads_the_hits_of_a_local_retriever(medretrieve_retriever):
    expected = medretrieve_retriever.search(QUESTION, k=3, deadline_ms=None).hits
    retriever = LangChainRetriever(source=medretrieve_retriever, k=3, deadline_ms=None)
    recorder = PromptRecorder()
    out = _rag_chain(retriever, "Metformin [1].").invoke(QUESTION, config={"callbacks": [recorder]})
    assert out == "Metformin [1]."
    system = recorder.prompts[0]
    assert f"[1] {expected[0].title} ({expected[0].section}): {expected[0].text}" in system
    assert all(h.text in system for h in expected)

    docs = retriever.invoke(QUESTION)
    assert all(isinstance(d, Document) for d in docs)
    assert [d.id for d in docs] == [h.chunk_id for h in expected]
    top, hit = docs[0], expected[0]
    assert top.page_content == hit.text
    assert top.metadata["document_id"] == hit.document_id == "demo-002"
    assert top.metadata["score"] == pytest.approx(hit.score)
    assert top.metadata["section"] == hit.section and top.metadata["title"] == hit.title
    # the demo's documents are no abstracts and their source gives no layout: no span (issue 44), not "abstract"
    assert hit.span is None
    assert [top.metadata[key] for key in ("beginSection", "offsetInBeginSection", "offsetInEndSection")] == [None] * 3
    assert top.metadata["source_url"] is None  # demo ids are not PubMed ids


def test_k_deadline_and_sections_reach_the_search_and_calls_override_them(medretrieve_retriever):
    source = RecordingSource(medretrieve_retriever)
    retriever = LangChainRetriever(source=source, k=4, deadline_ms=250.0, sections=["treatment"])
    assert len(retriever.invoke(QUESTION)) == 4
    docs = retriever.invoke(QUESTION, k=2, sections=["diagnosis", "symptoms"], deadline_ms=None)
    asyncio.run(retriever.ainvoke(QUESTION, k=1))
    assert [(c["k"], c["deadline_ms"], c["sections"]) for c in source.calls] == [
        (4, 250.0, ["treatment"]), (2, None, ["diagnosis", "symptoms"]), (1, 250.0, ["treatment"])]
    expected = medretrieve_retriever.search(QUESTION, k=2, deadline_ms=None, sections=["diagnosis", "symptoms"])
    assert [d.id for d in docs] == [h.chunk_id for h in expected.hits]
    with pytest.raises(TypeError, match="unknown search option top_k"):
        retriever.invoke(QUESTION, top_k=2)
    with pytest.raises(ValueError, match="astrology"):
        retriever.invoke(QUESTION, sections=["astrology"])


def test_every_declared_option_reaches_the_search(medretrieve_retriever):
    source = RecordingSource(medretrieve_retriever)
    retriever = LangChainRetriever(source=source, k=3, deadline_ms=None, per_document=1, mmr=True, bm25=False)
    docs = retriever.invoke(QUESTION, expand=False)
    options = {"k": 3, "per_document": 1, "mmr": True, "bm25": False, "expand": False}
    assert source.calls == [{"question": QUESTION, "deadline_ms": None, **options}]
    expected = medretrieve_retriever.search(QUESTION, deadline_ms=None, **options)
    assert [d.id for d in docs] == [h.chunk_id for h in expected.hits]
    assert retriever.invoke(QUESTION, mmr=None) and "mmr" not in source.calls[-1]  # None: the source's setting


@pytest.mark.parametrize("bad,error,says", [
    ({"k": "5"}, TypeError, "k must be an integer"), ({"k": True}, TypeError, "k must be an integer"),
    ({"deadline_ms": "300"}, TypeError, "deadline_ms must be a number"), ({"k": 0}, ValueError, "k must be in"),
    ({"per_documnt": 1}, TypeError, "per_documnt"), ({"section": ["diagnosis"]}, TypeError, "section"),
    ({"mmr": 1}, TypeError, "mmr must be true or false"), ({"dense": False, "bm25": False}, ValueError, "bm25")])
def test_options_are_refused_as_the_http_api_refuses_them_over_a_folder_and_a_url(medretrieve_collection, server,
                                                                                   bad, error, says):
    # k="5" and k=True were sent as 5 and 1 over a URL, an unknown name dropped in silence
    for source in (str(medretrieve_collection.directory), server.url):
        with pytest.raises(error, match=says):
            LangChainRetriever(source=source, **bad)
    retriever = LangChainRetriever(source=server.url)
    with pytest.raises(error, match=says):
        retriever.invoke(QUESTION, **bad)
    retriever.close()


def test_over_a_server_sync_and_async(server, medretrieve_retriever):
    expected = [h.chunk_id for h in medretrieve_retriever.search(QUESTION, k=3, deadline_ms=60000).hits]
    with Client(server.url) as client:
        sync = LangChainRetriever(source=client, k=3, deadline_ms=60000)
        assert [d.id for d in sync.invoke(QUESTION)] == expected
        assert [d.id for d in asyncio.run(sync.ainvoke(QUESTION))] == expected  # a sync client in a thread
    by_url = LangChainRetriever(source=server.url, k=3, deadline_ms=60000)
    assert [d.id for d in by_url.batch([QUESTION, QUESTION])[1]] == expected
    by_url.close()

    async def chain_over_async_client():
        async with AsyncClient(server.url) as client:
            retriever = LangChainRetriever(source=client, k=3, deadline_ms=60000)
            with pytest.raises(TypeError, match="answers only the async calls"):
                retriever.invoke(QUESTION)
            docs = await retriever.ainvoke(QUESTION)
            reply = await _rag_chain(retriever, "Metformin [1].").ainvoke(QUESTION)
            return docs, reply

    docs, reply = asyncio.run(chain_over_async_client())
    assert [d.id for d in docs] == expected and reply == "Metformin [1]."
    assert docs[0].metadata["document_id"] == "demo-002" and docs[0].metadata["beginSection"] is None
