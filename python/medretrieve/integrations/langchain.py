"""medretrieve as a LangChain retriever (the ``langchain`` extra: ``langchain-core``).

``LangChainRetriever(source=...)`` is a ``langchain_core`` ``BaseRetriever``, so it runs anywhere a retriever
does: ``invoke`` / ``ainvoke``, ``batch``, LCEL chains (``retriever | format_docs``), ``EnsembleRetriever``.
``source`` is a :class:`~medretrieve.retrieval.retriever.Retriever`, a
:class:`~medretrieve.client.Client` / :class:`~medretrieve.client.AsyncClient`, a collection folder or a
server URL (:mod:`.source`). Each hit becomes a ``Document`` whose ``page_content`` is the chunk's text,
``id`` its chunk id, and ``metadata`` :func:`~.source.hit_metadata` (document id, title, section, score, BioASQ
span, source link).

The search options are those of the search declaration (:data:`medretrieve.wire.SEARCH_OPTIONS`, the keyword
arguments of ``Retriever.search``): ``k``, ``deadline_ms`` (ms; None: no deadline), ``sections`` (section
categories every hit must come from) and the others (``per_document``, the stage switches ``mmr``, ``bm25``, ...)
are set on the retriever, ``LangChainRetriever(source=..., k=5, mmr=True)``, and may be overridden per call:
``retriever.invoke(question, k=3)``. An option not given is the source's own setting. They are checked as the
HTTP API checks them: an unknown or misspelt option, or a value of the wrong type (``k="5"``), is a TypeError
naming it, a value out of bounds a ValueError.
"""
from __future__ import annotations

from typing import Any, Dict, List, Optional

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr

from ..records import SearchResult
from ..wire import SEARCH_OPTIONS, SearchOptionTypeError
from .filter_syntax import from_mongo, with_filter
from .source import SearchCall, Searcher, hit_metadata


class LangChainRetriever(BaseRetriever):
    """medretrieve's hybrid search as a LangChain retriever (module docstring)."""

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    source: Any = Field(description="Retriever, Client, AsyncClient, collection folder or server URL")
    k: Optional[int] = Field(None, description="hits (chunks) per search (None: the source's, 10)")
    deadline_ms: Optional[float] = Field(300.0, description="time budget of one search in ms (None: none)")
    sections: Optional[List[str]] = Field(None, description="section categories every hit must come from")
    api_key: Optional[SecretStr] = Field(None, description="the API key of a server URL source (default: "
                                         "$MEDRETRIEVE_API_KEY when set)")
    filter: Optional[Any] = Field(None, description="metadata filter in the vector stores' form ({'year': "
                                  "{'$gte': 2015}}, $and / $or / $not) or medretrieve's text; a call's filter= "
                                  "replaces it")
    options: Dict[str, Any] = Field(default_factory=dict, description="the other search options given "
                                    "(per_document, stage switches: medretrieve.wire.SEARCH_OPTIONS)")
    _searcher: Searcher = PrivateAttr()

    def __init__(self, **data: Any) -> None:
        """The fields, with any declared search option as a keyword argument (it goes to ``options``); every option
        is checked by the declaration before pydantic reads it (pydantic would take ``"5"`` as 5, drop an unknown
        name and wrap the error): TypeError / ValueError naming the option."""
        unknown = sorted(set(data) - set(type(self).model_fields) - set(SEARCH_OPTIONS))
        if unknown:
            raise SearchOptionTypeError(f"LangChainRetriever: unknown argument{'s' if len(unknown) > 1 else ''} "
                                        f"{', '.join(unknown)}; search options: {', '.join(SEARCH_OPTIONS)}",
                                        unknown[0])
        options = {**data.pop("options", {}), **{name: data.pop(name) for name in list(data)
                                                 if name in SEARCH_OPTIONS and name not in ("k", "deadline_ms",
                                                                                            "sections")}}
        SearchCall.of(**{name: data[name] for name in ("k", "deadline_ms", "sections") if name in data},
                      **with_filter(options, data.get("filter"), from_mongo))
        super().__init__(**{**data, "options": options})

    def model_post_init(self, context: Any) -> None:
        self._searcher = Searcher(self.source, self.api_key.get_secret_value() if self.api_key else None)

    def _call(self, overrides: dict) -> SearchCall:
        overrides = dict(overrides)
        native = overrides.pop("filter", None)  # a call's own filter replaces the retriever's, as in LangChain
        options = with_filter(self.options, self.filter if native is None else native, from_mongo)
        return SearchCall.of(self.deadline_ms, k=self.k, sections=self.sections, **options).with_overrides(overrides)

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
