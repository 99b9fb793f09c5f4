"""medretrieve as a LangChain retriever (the ``langchain`` extra: ``langchain-core``).

``LangChainRetriever(source=...)`` is a ``langchain_core`` ``BaseRetriever``, so it runs anywhere a retriever
does: ``invoke`` / ``ainvoke``, ``batch``, LCEL chains (``retriever | format_docs``), ``EnsembleRetriever``.
``source`` is a :class:`~medretrieve.retrieval.retriever.Retriever`, a
:class:`~medretrieve.client.Client` / :class:`~medretrieve.client.AsyncClient`, a collection folder or a
server URL (:mod:`.source`). Each hit becomes a ``Document`` whose ``page_content`` is the chunk's text,
``id`` its chunk id, and ``metadata`` :func:`~.source.hit_metadata` (document id, title, section, score, BioASQ
span, source link).

``k``, ``deadline_ms`` (ms; None: no deadline) and ``sections`` (section categories every hit must come
from) are set on the retriever and may be overridden per call: ``retriever.invoke(question, k=3)``.
"""
from __future__ import annotations

from typing import Any, List, Optional

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr

from ..records import SearchResult
from .source import SearchCall, Searcher, hit_metadata


class LangChainRetriever(BaseRetriever):
    """medretrieve's hybrid search as a LangChain retriever (module docstring)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    source: Any = Field(description="Retriever, Client, AsyncClient, collection folder or server URL")
    k: int = Field(10, description="hits (chunks) per search")
    deadline_ms: Optional[float] = Field(300.0, description="time budget of one search in ms (None: none)")
    sections: Optional[List[str]] = Field(None, description="section categories every hit must come from")
    _searcher: Searcher = PrivateAttr()

    def model_post_init(self, context: Any) -> None:
        self._searcher = Searcher(self.source)

    def _call(self, overrides: dict) -> SearchCall:
        return SearchCall(self.k, self.deadline_ms, self.sections).with_overrides(overrides)

    def _get_relevant_documents(self, query: str, *, run_manager: CallbackManagerForRetrieverRun,
                                **overrides: Any) -> List[Document]:
        call = self._call(overrides)
        return _documents(self._searcher.search(query, call))

    async def _aget_relevant_documents(self, query: str, *, run_manager: AsyncCallbackManagerForRetrieverRun,
                                       **overrides: Any) -> List[Document]:
        call = self._call(overrides)
        return _documents(await self._searcher.asearch(query, call))

    def close(self) -> None:
        """Close the client opened from a server URL (nothing to do for other sources)."""
        self._searcher.close()


def _documents(result: SearchResult) -> List[Document]:
    return [Document(page_content=h.text, metadata=hit_metadata(h), id=h.chunk_id) for h in result.hits]
