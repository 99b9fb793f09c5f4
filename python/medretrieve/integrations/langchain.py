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
from pydantic import ConfigDict, Field, PrivateAttr, SecretStr, ValidationInfo, field_validator, model_validator

from ..records import SearchResult
from ..wire import SEARCH_OPTIONS, check_search_options
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
    options: Dict[str, Any] = Field(default_factory=dict, description="the other search options given "
                                    "(per_document, stage switches: medretrieve.wire.SEARCH_OPTIONS)")
    _searcher: Searcher = PrivateAttr()

    @model_validator(mode="before")
    @classmethod
    def _declared_options(cls, data: Any) -> Any:
        """Search options given as keyword arguments go to ``options``; any other unknown name is a TypeError
        (pydantic would drop it silently)."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        unknown = sorted(set(data) - set(cls.model_fields) - set(SEARCH_OPTIONS))
        if unknown:
            raise TypeError(f"LangChainRetriever: unknown argument{'s' if len(unknown) > 1 else ''} "
                            f"{', '.join(unknown)}; search options: {', '.join(SEARCH_OPTIONS)}")
        given = {name: data.pop(name) for name in list(data)
                 if name in SEARCH_OPTIONS and name not in cls.model_fields}
        if given:
            data["options"] = {**data.get("options", {}), **given}
        return data

    @field_validator("k", "deadline_ms", "sections", mode="before")
    @classmethod
    def _strict(cls, value: Any, info: ValidationInfo) -> Any:
        """The declaration's check, before pydantic's own (which would take "5" as 5)."""
        return value if value is None else check_search_options({info.field_name: value})[info.field_name]

    def model_post_init(self, context: Any) -> None:
        self._call({})  # the options' check, at construction
        self._searcher = Searcher(self.source, self.api_key.get_secret_value() if self.api_key else None)

    def _call(self, overrides: dict) -> SearchCall:
        return SearchCall.of(self.deadline_ms, k=self.k, sections=self.sections,
                             **self.options).with_overrides(overrides)

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
