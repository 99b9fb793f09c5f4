"""The sharded first stage: retrieval's :class:`~medretrieve.retrieval.first_stage.FirstStage` fanned out to every
shard (``ShardedRetriever`` passes it as the retriever's ``first_stage``; :mod:`.search`, step 2 and 3).

- :meth:`ShardedFirstStage.search`: one call to every shard runs the dense and BM25 searches there (and sends back
  the chunks of the best ``FEEDBACK_FETCH`` rows of each list, which feedback reads); it waits until the deadline
  less the share the later stages keep. Dense lists merge by inner product; BM25 lists are scored again with the
  statistics of all shards (:meth:`~.sharded_collection.ShardedCollection.lexical_lists`). It holds no BM25 score over every
  row (that cannot travel): the rerank scores the question's tokens on the rows it reads.
- :meth:`ShardedFirstStage.dense`: a dense search on every shard; with ``read_ahead`` (feedback: the candidates
  fused so far) or once the candidates are fetched (recovery), the rows come back in the same call.
- :meth:`ShardedFirstStage.readable`: ``fetch``, whatever the fused candidates still lack from their shards.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from ..outbound import Deadline
from ..retrieval.candidates import RESERVE
from ..retrieval.first_stage import FirstLists, RankedList
from ..retrieval.results import StageLog
from .sharded_collection import ShardedCollection

FEEDBACK_FETCH = 10  # rows of each own list whose chunks come back with the first stage (feedback reads the top 3)


class ShardedFirstStage:
    """:class:`~medretrieve.retrieval.first_stage.FirstStage` over every shard of a
    :class:`~.sharded_collection.ShardedCollection` (module docstring); ``feedback_docs``: the chunks feedback reads
    (``Settings.feedback_docs``)."""

    reads_ahead = True

    def __init__(self, collection: ShardedCollection, feedback_docs: int) -> None:
        self.collection = collection
        self.fetch_top = FEEDBACK_FETCH if feedback_docs <= FEEDBACK_FETCH else 0

    def search(self, vectors: Optional[np.ndarray], efs: Sequence[int], token_lists: Sequence[Sequence[str]],
               boost: Sequence[str], k: int, labels: Optional[List[int]], dl: Deadline) -> FirstLists:
        col = self.collection
        state = col.state
        state.deadline = dl  # every later call of this search waits within its deadline
        qvecs = vectors if vectors is not None and len(vectors) else None
        queries = [list(t) + (list(boost) if j == 0 else []) for j, t in enumerate(token_lists)]
        with dl.stage("shards"):
            replies = state.call("first_stage", {i: (qvecs, list(efs), k, queries, 2 * k, labels, self.fetch_top,
                                                     col.where) for i in state.live()},
                                 reserve_ms=dl.share_ms(RESERVE)).results
        for shard, reply in replies.items():
            state.add(shard, reply["rows"])
        out = FirstLists([], [])
        if qvecs is not None:
            with dl.stage("dense"):
                out.dense = col.dense_lists(qvecs, k, efs, labels, replies={i: r["dense"] for i, r in replies.items()})
        with dl.stage("bm25"):
            out.bm25 = col.lexical_lists(queries, k, labels, replies=replies) if queries else []
        return out

    def dense(self, vectors: np.ndarray, k: int, efs: Sequence[int], labels: Optional[List[int]],
              read_ahead: Optional[np.ndarray] = None) -> List[RankedList]:
        col = self.collection
        ids, scores = col.dense.search(vectors, k=min(k, max(len(col), 1)), ef=np.asarray(efs, dtype=np.int64),
                                       labels=labels, fetch_along=read_ahead)
        ok = ids >= 0  # every row a shard returns is live (shards filter their deleted rows)
        return [(ids[i][ok[i]], scores[i][ok[i]]) for i in range(len(ids))]

    def lexical(self, tokens: Sequence[str], k: int, labels: Optional[List[int]]) -> RankedList:
        col = self.collection
        return col.lexical.search(tokens, k=k, allowed=None if labels is None else col.allowed(labels))

    def readable(self, fused: np.ndarray, question: np.ndarray, dl: Deadline, log: StageLog
                 ) -> Tuple[np.ndarray, np.ndarray]:
        state = self.collection.state
        with dl.stage("fetch"):
            state.ensure(np.concatenate([fused, question]))
        state.fetch_hits = True  # recovery's searches fetch their hits with them
        keep_fused, keep_question = state.known(fused), state.known(question)
        log.record("fetch", True, f"{int(keep_fused.sum())} candidates' chunks from their shards")
        left_out = len(state.missed) + len(state.failed)
        total = len(state.shards)
        log.record("shards", True, f"{total - left_out} of {total} shards answered"
                   + (f" ({len(state.missed)} missed the deadline, {len(state.failed)} failed)" if left_out else ""),
                   cut=bool(state.missed))
        return keep_fused, keep_question
