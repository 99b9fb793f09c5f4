"""What one search reads: the collection, its first stage and the token sets of its chunks.

The stage objects (:class:`~.candidates.CandidateGenerator`, :class:`~.rerank.Reranker`,
:class:`~.recovery.Recovery`) hold only what lasts across searches (settings, cost estimates, models); a
``Retriever`` builds them once, and every call takes the :class:`SearchScope` it reads. A retriever keeps one
scope per collection snapshot (built again only when the collection changed); an online search builds one over
its pool, the only collection that is new with each search.
"""
from __future__ import annotations

from dataclasses import dataclass

from .collection_view import CollectionView
from .first_stage import FirstStage
from .matching import ChunkTokens


@dataclass(frozen=True)
class SearchScope:
    """The collection a search reads (a snapshot, an online search's pool, or a sharded search's rows), the first
    stage over it, and its chunks' token sets (a cache shared by the searches of this scope)."""

    collection: CollectionView
    first: FirstStage
    tokens: ChunkTokens
