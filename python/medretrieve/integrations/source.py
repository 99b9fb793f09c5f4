"""What every integration searches, and what it reports of a hit.

:class:`Searcher` is one door to a search, whatever stands behind it: a local
:class:`~medretrieve.retrieval.retriever.Retriever` (or anything with its ``search``, such as a sharded
retriever), a :class:`~medretrieve.client.Client` of a ``medretrieve serve`` process, or an
:class:`~medretrieve.client.AsyncClient`. A collection folder or an ``http(s)://`` URL names one too.
Sync sources serve the async calls in a worker thread (the search's own deadline bounds it); an AsyncClient
serves only the async ones.

:func:`hit_metadata` is the metadata every framework's document carries: the hit's document id, chunk id,
title, section, score, its BioASQ span and its source link (:func:`source_url`).
"""
from __future__ import annotations

import asyncio
import inspect
import os
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Dict, Mapping, Optional, Union

from ..records import Hit, SearchResult
from ..wire import check_search_options

PUBMED_ARTICLE_URL = "https://pubmed.ncbi.nlm.nih.gov/{}/"
SPAN_KEYS = ("beginSection", "endSection", "offsetInBeginSection", "offsetInEndSection")

SourceLike = Union[str, "os.PathLike[str]", Any]


def source_url(document_id: str, metadata: Optional[Dict[str, Any]] = None) -> Optional[str]:
    """A link to a hit's source: the document's own ``url`` metadata when it is an http(s) URL, the PubMed page
    when the id is a PMID (all digits), else None."""
    own = (metadata or {}).get("url")
    if isinstance(own, str) and own.startswith(("http://", "https://")):
        return own
    if document_id.isdigit():
        return PUBMED_ARTICLE_URL.format(document_id)
    return None


def hit_metadata(hit: Hit) -> Dict[str, Any]:
    """A hit as flat document metadata: the collection's own fields of the document (``topic``, ``year``, ...),
    then ``document_id``, ``chunk_id``, ``parent_id``, ``title``, ``section``, ``score`` (the final relevance),
    ``scores`` (each stage's), ``placed_by`` (None, or the stage that put the hit in its place: ``"recovery"``),
    ``source_url`` (None when unknown) and the BioASQ span's four fields
    (``beginSection`` ... ``offsetInEndSection``, character offsets; None when the collection does not know
    the chunk's section). Where a name is in both, the hit's own value wins."""
    span = hit.span or {}
    return {**hit.metadata,
            "document_id": hit.document_id, "chunk_id": hit.chunk_id, "parent_id": hit.parent_id,
            "title": hit.title, "section": hit.section, "score": float(hit.score), "scores": dict(hit.scores),
            "placed_by": hit.placed_by, "source_url": source_url(hit.document_id, hit.metadata),
            **{key: span.get(key) for key in SPAN_KEYS}}


@dataclass(frozen=True)
class SearchCall:
    """The options of one search, checked against the search declaration (:data:`medretrieve.wire.SEARCH_OPTIONS`)
    as every door checks them: ``deadline_ms`` (ms; None: no deadline, or the server's default over a URL) and
    ``options``, the other options given (``k``, ``per_document``, ``sections``, the stage switches); one not
    given is the retriever's setting. Make one with :meth:`of`."""

    deadline_ms: Optional[float]
    options: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, deadline_ms: Optional[float] = None, **options: Any) -> "SearchCall":
        """The call with these options (None: not given). Strict as the HTTP API: TypeError for an unknown or
        misspelt option and for a value of the wrong type (``"5"`` or ``True`` for ``k``: no coercion),
        ValueError for one out of its bounds; each message names the option."""
        checked = check_search_options({**options, "deadline_ms": deadline_ms})
        return cls(checked.pop("deadline_ms", None), MappingProxyType(checked))

    def with_overrides(self, overrides: Mapping[str, Any]) -> "SearchCall":
        """These options with a call's own (any declared option; None resets one to the retriever's setting),
        checked as :meth:`of` checks them."""
        return SearchCall.of(**{"deadline_ms": self.deadline_ms, **self.options, **overrides})

    def kwargs(self) -> Dict[str, Any]:
        """Keyword arguments of ``search``: the deadline and the options given."""
        return {"deadline_ms": self.deadline_ms, **self.options}


def _open(source: SourceLike, api_key: Optional[str] = None) -> Any:
    """The search object a folder or URL names (others pass through); ``api_key``: the server's key, for a URL
    only (TypeError otherwise: a Client takes its own, a folder needs none)."""
    text = os.fspath(source) if isinstance(source, (str, os.PathLike)) else None
    if api_key is not None and not (text or "").startswith(("http://", "https://")):
        raise TypeError("api_key goes with a server URL source (a Client takes its own api_key; a collection "
                        "folder or a Retriever needs none)")
    if text is None:
        return source
    if text.startswith(("http://", "https://")):
        from ..client.client import Client

        return Client(text, api_key=api_key)
    from ..corpus.collection import Collection
    from ..retrieval.retriever import Retriever

    return Retriever(Collection.open(text))


class Searcher:
    """One door to a search (module docstring). ``source``: a Retriever-like object, a Client, an AsyncClient,
    a collection folder or a server URL; ``api_key``: the key of a server URL (default: ``$MEDRETRIEVE_API_KEY``
    when set)."""

    def __init__(self, source: SourceLike, api_key: Optional[str] = None) -> None:
        target = _open(source, api_key)
        search = getattr(target, "search", None)
        if not callable(search):
            raise TypeError("source must be a medretrieve Retriever, Client or AsyncClient (an object with "
                            f"search(question, k=..., deadline_ms=..., sections=...)), a collection folder or "
                            f"an http(s):// server URL; got {type(target).__name__}")
        self.target = target
        self.owned = target is not source  # opened here from a folder or URL: closed by close()
        self.is_async = inspect.iscoroutinefunction(search)

    def search(self, question: str, call: SearchCall) -> SearchResult:
        """The source's search with ``call``'s options."""
        if self.is_async:
            raise TypeError(f"{type(self.target).__name__} answers only the async calls; pass a sync Client "
                            "(or a Retriever) for the sync ones")
        result: SearchResult = self.target.search(question, **call.kwargs())
        return result

    async def asearch(self, question: str, call: SearchCall) -> SearchResult:
        """The same search, awaited: natively for an AsyncClient, in a worker thread for a sync source."""
        if self.is_async:
            result: SearchResult = await self.target.search(question, **call.kwargs())
            return result
        return await asyncio.to_thread(self.search, question, call)

    def close(self) -> None:
        """Close the client this searcher opened from a URL (a source the caller passed is the caller's)."""
        close = getattr(self.target, "close", None)
        if self.owned and callable(close):
            close()

