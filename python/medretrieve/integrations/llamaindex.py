"""medretrieve as a LlamaIndex retriever (the ``llamaindex`` extra: ``llama-index-core``).

``LlamaIndexRetriever(source, k=..., deadline_ms=..., sections=..., **options)`` is a ``llama_index.core``
``BaseRetriever``:
``retrieve`` / ``aretrieve`` return ``NodeWithScore`` objects, so it plugs into a ``RetrieverQueryEngine``, a
``ContextChatEngine`` or a router like any other retriever. ``source`` is a
:class:`~medretrieve.retrieval.retriever.Retriever`, a :class:`~medretrieve.client.Client` /
:class:`~medretrieve.client.AsyncClient`, a collection folder or a server URL (:mod:`.source`). The search options
are those of the search declaration (:data:`medretrieve.wire.SEARCH_OPTIONS`, the keyword arguments of
``Retriever.search``), checked as the HTTP API checks them (TypeError for an unknown or misspelt option or a value
of the wrong type, ValueError out of bounds); one not given is the source's own setting.

Each hit becomes a ``TextNode`` (id: the chunk id; text: the chunk's; its source relationship: the document id)
with the hit's score and :func:`~.source.hit_metadata` as metadata. The LLM reads the title, section, document
id, source link and the collection's own fields beside the text; ids, scores, offsets and ``placed_by`` (the
stage that placed a hit) stay out of the prompt and out of any re-embedding, and so do fields without a value
(``excluded_llm_metadata_keys`` / ``excluded_embed_metadata_keys``); all stay in the node's metadata.
"""
from __future__ import annotations

from typing import Any, List, Optional, Sequence

from llama_index.core.callbacks import CallbackManager
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.schema import NodeRelationship, NodeWithScore, QueryBundle, RelatedNodeInfo, TextNode

from ..records import SearchResult
from .filter_syntax import from_llamaindex, with_filter
from .source import SPAN_KEYS, SearchCall, Searcher, SourceLike, hit_metadata

# metadata the LLM and an embedder do not read (bookkeeping, not evidence): ids, scores, offsets and which stage
# placed the hit (``placed_by``: it says how the list was made, not what the source says)
HIDDEN_KEYS = ["chunk_id", "parent_id", "score", "scores", "placed_by", *SPAN_KEYS]


class LlamaIndexRetriever(BaseRetriever):
    """medretrieve's hybrid search as a LlamaIndex retriever (module docstring). ``k``: hits per search (None: the
    source's, 10); ``deadline_ms``: the time budget of one search (ms; None: none); ``sections``: section
    categories every hit must come from (None: all); ``options``: the other search options (``per_document``,
    stage switches). They are attributes, so a caller may change them between queries (each query checks them).
    ``api_key``: the key of a server URL source (default: ``$MEDRETRIEVE_API_KEY`` when set)."""

    def __init__(self, source: SourceLike, *, k: Optional[int] = None, deadline_ms: Optional[float] = 300.0,
                 sections: Optional[Sequence[str]] = None, callback_manager: Optional[CallbackManager] = None,
                 verbose: bool = False, api_key: Optional[str] = None, filters: Any = None,
                 **options: Any) -> None:
        self.k = k
        self.filters = filters  # LlamaIndex MetadataFilters (or medretrieve's text), mapped onto where
        self.deadline_ms = deadline_ms
        self.sections = sections
        self.options = options
        self._call()  # the options' check, before anything is opened
        self.searcher = Searcher(source, api_key)  # api_key: a server URL's (default $MEDRETRIEVE_API_KEY)
        super().__init__(callback_manager=callback_manager, verbose=verbose)

    def _call(self) -> SearchCall:
        return SearchCall.of(self.deadline_ms, k=self.k, sections=self.sections,
                             **with_filter(self.options, self.filters, from_llamaindex))

    def _retrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return _nodes(self.searcher.search(query_bundle.query_str, self._call()))

    async def _aretrieve(self, query_bundle: QueryBundle) -> List[NodeWithScore]:
        return _nodes(await self.searcher.asearch(query_bundle.query_str, self._call()))

    def close(self) -> None:
        """Close the client opened from a server URL (nothing to do for other sources)."""
        self.searcher.close()


def _nodes(result: SearchResult) -> List[NodeWithScore]:
    out = []
    for h in result.hits:
        meta = hit_metadata(h)
        hidden = HIDDEN_KEYS + [key for key, value in meta.items() if value is None and key not in HIDDEN_KEYS]
        node = TextNode(id_=h.chunk_id, text=h.text, metadata=meta,
                        excluded_llm_metadata_keys=hidden, excluded_embed_metadata_keys=list(hidden),
                        relationships={NodeRelationship.SOURCE: RelatedNodeInfo(node_id=h.document_id)})
        out.append(NodeWithScore(node=node, score=float(h.score)))
    return out

