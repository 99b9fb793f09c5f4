"""The first stage: dense and BM25 gathering for an analysed query, with its filters (section labels, live rows).

:class:`FirstStage` is the declared interface the retriever's candidate generation (:mod:`.candidates`) and
recovery (:mod:`.recovery`) both call; :class:`LocalFirstStage` implements it over one collection, and the
sharded layer (``medretrieve.distributed``) supplies its own implementation that fans each call out to its
shards. A ``Retriever`` takes the implementation as ``first_stage`` (a factory from the collection a search reads
to the stage over it).

Rows in every list are live (deleted rows never come back) and carry one of ``labels`` when labels are given.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, List, Optional, Protocol, Sequence, Tuple

import numpy as np

from ..outbound import Deadline
from .collection_view import CollectionView, SearchableCollection
from .results import StageLog

RankedList = Tuple[np.ndarray, np.ndarray]  # (rows int64, scores float32), best first


@dataclass
class FirstLists:
    """What one first-stage search found: a dense list per query vector, a BM25 list per token list, and the
    question's BM25 score over every row (the first token list's; None when the stage cannot hold one, e.g. over
    shards, or without token lists): the rerank reads the question's BM25 from it when present."""

    dense: List[RankedList]
    bm25: List[RankedList]
    question_bm25: Optional[np.ndarray] = None


class FirstStage(Protocol):
    """Dense and BM25 gathering over a collection (module docstring)."""

    #: whether :meth:`dense` reads rows ahead (``read_ahead``): a caller computes them only when it does
    reads_ahead: bool

    def search(self, vectors: Optional[np.ndarray], efs: Sequence[int], token_lists: Sequence[Sequence[str]],
               boost: Sequence[str], k: int, labels: Optional[List[int]], dl: Deadline) -> FirstLists:
        """Dense lists of ``vectors`` (row i searched at ``efs[i]``) and BM25 lists of ``token_lists`` (the first
        with the extra tokens ``boost``), ``k`` rows each; timed as the ``dense`` and ``bm25`` stages of ``dl``."""

    def dense(self, vectors: np.ndarray, k: int, efs: Sequence[int], labels: Optional[List[int]],
              read_ahead: Optional[np.ndarray] = None) -> List[RankedList]:
        """One dense list per row of ``vectors`` (untimed: the caller times it). ``read_ahead``: rows the caller
        reads next (an implementation that fetches rows may fetch them in the same call)."""

    def lexical(self, tokens: Sequence[str], k: int, labels: Optional[List[int]]) -> RankedList:
        """One BM25 list (untimed)."""

    def readable(self, fused: np.ndarray, question: np.ndarray, dl: Deadline, log: StageLog
                 ) -> Tuple[np.ndarray, np.ndarray]:
        """Make the rows the later stages read available (a sharded stage fetches them from their shards);
        masks of ``fused`` and ``question`` saying which are (rows whose shard failed are not)."""


FirstStageFactory = Callable[[CollectionView], FirstStage]


class LocalFirstStage:
    """:class:`FirstStage` over one local collection (a collection snapshot or an online search's pool)."""

    reads_ahead = False

    def __init__(self, collection: SearchableCollection) -> None:
        self.collection = collection

    def live(self, ids: np.ndarray, scores: np.ndarray) -> RankedList:
        """The found (not -1) live rows of one index result row, with their scores."""
        ok = ids >= 0
        ok[ok] = self.collection.alive[ids[ok]]
        return ids[ok], scores[ok]

    def dense(self, vectors: np.ndarray, k: int, efs: Sequence[int], labels: Optional[List[int]],
              read_ahead: Optional[np.ndarray] = None) -> List[RankedList]:
        col = self.collection
        ids, scores = col.dense.search(vectors, k=min(k, max(len(col), 1)), ef=np.asarray(efs, dtype=np.int64),
                                       labels=labels)
        ids = np.asarray(ids, dtype=np.int64).reshape(len(vectors), -1)
        scores = np.asarray(scores, dtype=np.float32).reshape(len(vectors), -1)
        return [self.live(ids[i], scores[i]) for i in range(len(vectors))]

    def lexical(self, tokens: Sequence[str], k: int, labels: Optional[List[int]]) -> RankedList:
        col = self.collection
        return col.lexical.search(tokens, k=k, allowed=col.alive if labels is None else col.allowed(labels))

    def search(self, vectors: Optional[np.ndarray], efs: Sequence[int], token_lists: Sequence[Sequence[str]],
               boost: Sequence[str], k: int, labels: Optional[List[int]], dl: Deadline) -> FirstLists:
        col = self.collection
        out = FirstLists([], [])
        if vectors is not None and len(vectors):
            with dl.stage("dense"):
                out.dense = self.dense(vectors, k, efs, labels)
        with dl.stage("bm25"):
            allowed = col.alive if labels is None else col.allowed(labels)
            for j, tokens in enumerate(token_lists):
                all_scores = col.lexical.scores(tokens, extra_tokens=boost if j == 0 else ())
                if j == 0:
                    out.question_bm25 = all_scores
                out.bm25.append(col.lexical.top(all_scores, k=k, allowed=allowed))
        return out

    def readable(self, fused: np.ndarray, question: np.ndarray, dl: Deadline, log: StageLog
                 ) -> Tuple[np.ndarray, np.ndarray]:
        return np.ones(len(fused), dtype=bool), np.ones(len(question), dtype=bool)
