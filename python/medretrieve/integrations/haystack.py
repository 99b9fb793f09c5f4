"""medretrieve as a Haystack component (the ``haystack`` extra: ``haystack-ai``, the 2.x components API).

``HaystackRetriever(source, k=..., deadline_ms=..., sections=..., **options)`` is a ``@component`` with ``run``
and ``run_async`` (an ``AsyncPipeline`` awaits the latter): input ``query`` (and per run ``top_k``, ``sections``),
output ``documents``, a list of Haystack ``Document`` objects (id: the chunk id; content: the chunk's text;
score: the hit's relevance; meta: :func:`~.source.hit_metadata`: document id, title, section, BioASQ span,
source link). ``source`` is a :class:`~medretrieve.retrieval.retriever.Retriever`, a
:class:`~medretrieve.client.Client` / :class:`~medretrieve.client.AsyncClient`, a collection folder or a
server URL (:mod:`.source`). The search options are those of the search declaration
(:data:`medretrieve.wire.SEARCH_OPTIONS`, the keyword arguments of ``Retriever.search``: ``per_document`` and the
stage switches beside these three), checked as the HTTP API checks them (TypeError for an unknown or misspelt
option or a value of the wrong type, ValueError out of bounds); one not given is the source's own setting.
Built from a folder or URL, the component serialises with its pipeline
(``Pipeline.dumps`` / ``loads``); built from an object, it cannot (``to_dict`` says so).
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Optional, Sequence

from haystack import Document, component, default_from_dict, default_to_dict
from haystack.utils import Secret, deserialize_secrets_inplace

from ..records import SearchResult
from .filter_syntax import from_haystack, with_filter
from .source import SearchCall, Searcher, SourceLike, hit_metadata


@component
class HaystackRetriever:
    """medretrieve's hybrid search as a Haystack retriever component (module docstring). ``k``: hits per run
    (``top_k`` overrides it; None: the source's, 10); ``deadline_ms``: the time budget of one search (ms; None:
    none); ``sections``: section categories every hit must come from (a run's ``sections`` overrides them);
    ``options``: the other search options (``per_document``, stage switches). ``api_key``: the key of a server URL
    source, a Haystack ``Secret`` (default: ``$MEDRETRIEVE_API_KEY`` when set)."""

    def __init__(self, source: SourceLike, k: Optional[int] = None, deadline_ms: Optional[float] = 300.0,
                 sections: Optional[List[str]] = None, api_key: Optional[Secret] = None,
                 filters: Optional[Dict[str, Any]] = None, **options: Any) -> None:
        self.filters = filters  # Haystack filter dicts, mapped onto where; a run's filters replace them
        self.call = SearchCall.of(deadline_ms, k=k, sections=sections,
                                  **with_filter(options, filters, from_haystack))  # checked before opening
        self.source = source
        if api_key is not None and not isinstance(api_key, Secret):  # Haystack's way: never a bare string
            raise TypeError("api_key is a haystack Secret: Secret.from_env_var('MEDRETRIEVE_API_KEY') (written into "
                            "a pipeline by name) or Secret.from_token(key)")
        self.api_key = api_key
        self.searcher = Searcher(source, None if api_key is None else api_key.resolve_value())

    def _for_run(self, top_k: Optional[int], sections: Optional[Sequence[str]],
                 filters: Optional[Dict[str, Any]] = None) -> SearchCall:
        overrides: Dict[str, Any] = {}
        if filters is not None:  # replaces the component's (Haystack's default filter policy)
            overrides = with_filter({"where": self.call.options.get("where") if self.filters is None else None},
                                    filters, from_haystack)
        if top_k is not None:
            overrides["k"] = top_k
        if sections is not None:
            overrides["sections"] = sections
        return self.call.with_overrides(overrides)

    @component.output_types(documents=List[Document])
    def run(self, query: str, top_k: Optional[int] = None, sections: Optional[List[str]] = None,
            filters: Optional[Dict[str, Any]] = None) -> Dict[str, List[Document]]:
        """The best chunks for ``query`` (``top_k`` / ``sections`` / ``filters``: this run's own, else the
        component's)."""
        return {"documents": _documents(self.searcher.search(query, self._for_run(top_k, sections, filters)))}

    @component.output_types(documents=List[Document])
    async def run_async(self, query: str, top_k: Optional[int] = None, sections: Optional[List[str]] = None,
                        filters: Optional[Dict[str, Any]] = None) -> Dict[str, List[Document]]:
        """:meth:`run`, awaited (natively over an AsyncClient, in a worker thread over other sources)."""
        return {"documents": _documents(await self.searcher.asearch(query, self._for_run(top_k, sections,
                                                                                         filters)))}

    def to_dict(self) -> Dict[str, Any]:
        """The component as pipeline YAML/JSON data; only a folder or URL source can be written down."""
        if not isinstance(self.source, (str, os.PathLike)):
            raise TypeError("a HaystackRetriever serialises only when built from a collection folder or a server "
                            f"URL, not from a {type(self.source).__name__} object")
        # a key from the environment is written by its variable's name; Secret.to_dict refuses a token's value
        key = {} if self.api_key is None else {"api_key": self.api_key.to_dict()}
        options = dict(self.call.options)
        if self.filters is not None:  # written as given (its where is derived from it)
            options["filters"] = self.filters
            options.pop("where", None)
        return default_to_dict(self, source=os.fspath(self.source), deadline_ms=self.call.deadline_ms,
                               **key, **options)

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "HaystackRetriever":
        deserialize_secrets_inplace(data.get("init_parameters", {}), keys=["api_key"])
        return default_from_dict(cls, data)

    def close(self) -> None:
        """Close the client opened from a server URL (nothing to do for other sources)."""
        self.searcher.close()


def _documents(result: SearchResult) -> List[Document]:
    return [Document(id=h.chunk_id, content=h.text, meta=hit_metadata(h), score=float(h.score)) for h in result.hits]
