"""Sharded search: one question fanned out to every shard under the request's deadline, one rerank over all.

:class:`ShardedRetriever` is a :class:`~medretrieve.retrieval.retriever.Retriever` (same ``search`` signature,
same :class:`~medretrieve.retrieval.results.SearchResult`, usable wherever a Retriever is) whose collection is
many shard collections, each held by a Ray actor (:class:`~.shard.ShardSearcher`, memory-mapped). A search:

1. analyses and expands the question and encodes it once, here (the query encoder of the shards' manifests);
2. ``shards``: one call to every shard runs the dense and BM25 first stage there; it waits until the deadline less
   the 35% the later stages keep. Dense lists merge by inner product; BM25 lists are scored again here from each
   row's term counts with the statistics of all shards (document frequencies summed, the average length of all
   rows), so they merge as if one index held every shard (:func:`~medretrieve.corpus.lexical.bm25_from_counts`);
3. pseudo-relevance feedback (the chunks of the best 10 rows of each shard's own lists came back with step 2; its
   search fans out and brings back, in the same call, the chunks of its hits and of the candidates fused so far),
   RRF fusion, then ``fetch``: whatever the fused candidates still lack (chunks, vectors, tokens, documents) from
   their shards. Two round trips to each shard in most searches;
4. rerank, MMR, pruning, weak detection and recovery run once, over every shard's candidates, unchanged
   (:class:`~.pool.ShardedCollection` answers their questions from what was fetched; recovery's extra searches
   fan out too).

A shard that misses a call's deadline or fails (its actor died; Ray restarts it for later searches) is left out of
the rest of that search: the result holds the other shards' hits, ``result.shards`` says which shards answered,
which missed and which failed, ``result.partial`` is True and the ``shards`` stage is marked cut.

Ties: rows are keyed ``shard << 40 | row`` (:mod:`.pool`), so over shards built from a corpus split in order the
hits equal those of one collection of the shards concatenated (the tests check this on a small corpus).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple, Type, Union

import numpy as np

from ..corpus.chunking import CATEGORY_IDS
from ..fusion import rrf
from ..retrieval.budget import Deadline
from ..retrieval.candidates import RESERVE, ROUTES, CandidateGenerator, Candidates, QueryText, Switches
from ..retrieval.query import Query
from ..retrieval.results import SearchResult, StageLog
from ..retrieval.retriever import Retriever
from .fanout import ShardSet, default_name_prefix
from .pool import GlobalStats, ShardedCollection, ShardPool
from .shard import ShardSearcher
from .shards import PathLike, shard_dirs

FEEDBACK_FETCH = 10  # rows of each own list whose chunks come back with the first stage (feedback reads the top 3)


class ShardedCandidateGenerator(CandidateGenerator):
    """The first stages with the dense and BM25 searches run on every shard (module docstring, step 2)."""

    collection: ShardedCollection

    def _route_labels(self, query: Query, route: bool) -> Tuple[Tuple[str, ...], List[int]]:
        cats = ROUTES.get(query.intent, ()) if route else ()
        labels = [CATEGORY_IDS[c] for c in cats]
        if labels and not set(labels) & self.collection.stats.labels:  # no shard holds such a section
            labels = []
        return cats, labels

    def _first_stage(self, query: Query, texts: Sequence[QueryText], ef: int, k: int, labels: Optional[List[int]],
                     dl: Deadline, boost: Sequence[str] = ()
                     ) -> Tuple[List[np.ndarray], List[np.ndarray], List[str], Optional[np.ndarray]]:
        col = self.collection
        pool = col.pool
        qvecs = query.vectors if query.vectors is not None and len(query.vectors) else None
        efs = [] if qvecs is None else [max(ef, k)] + [max(ef // 2, k)] * (len(qvecs) - 1)
        queries = [list(t.tokens) + (list(boost) if j == 0 else []) for j, t in enumerate(texts)]
        if queries:
            pool.question = queries[0]
        with dl.stage("shards"):
            fetch_top = FEEDBACK_FETCH if self.settings.feedback_docs <= FEEDBACK_FETCH else 0
            replies = pool.call("first_stage", {i: (qvecs, efs, k, queries, 2 * k, labels, fetch_top)
                                                for i in pool.live()}, reserve_ms=dl.share_ms(RESERVE)).results
        for shard, reply in replies.items():
            pool.add(shard, reply["rows"])
        ids_lists: List[np.ndarray] = []
        score_lists: List[np.ndarray] = []
        kinds: List[str] = []
        if qvecs is not None:
            with dl.stage("dense"):
                for ids, sc in col.dense_lists(qvecs, k, efs, labels, replies={i: r["dense"] for i, r in replies.items()}):
                    ids_lists.append(ids)
                    score_lists.append(sc)
                    kinds.append("dense")
        with dl.stage("bm25"):
            for ids, sc in col.lexical_lists(queries, k, labels, replies=replies) if queries else []:
                ids_lists.append(ids)
                score_lists.append(sc)
                kinds.append("bm25")
        # the question's BM25 over every row cannot travel; this stand-in tells the stages to score the rows they
        # ask about with pool.question (ShardedCollection.lexical.scores_for)
        question_bm25 = np.zeros(0, dtype=np.float32) if queries else None
        return ids_lists, score_lists, kinds, question_bm25

    def _feedback(self, qvec: np.ndarray, lists: Sequence[np.ndarray], weights: Sequence[float], ef: int,
                  ncand: int, labels: Optional[List[int]], dl: Deadline
                  ) -> Tuple[Optional[np.ndarray], Optional[np.ndarray], str]:
        """As one collection's; its search fetches along the rows of the candidates fused so far (most of the
        final ones), so the candidates need no round trip of their own."""
        pool = self.collection.pool
        pool.fetch_along = np.asarray(rrf(lists, k=self.settings.rrf_k, weights=weights, top_n=ncand)[0],
                                      dtype=np.int64)
        try:
            return super()._feedback(qvec, lists, weights, ef, ncand, labels, dl)
        finally:
            pool.fetch_along = None


class ShardedRetriever(Retriever):
    """Hybrid retrieval over many shard collections on Ray (module docstring).

    ``shards``: a sharded build's directory (``shards.json``, see :mod:`.build`) or a list of collection
    directories, however they were built; every shard must hold the same encoder. The retriever settings
    (``cross_encoder``, ``training``, ``ranker``, ``llm_terms``, ``settings``, keyword tuning) are those of
    :class:`~medretrieve.retrieval.retriever.Retriever`. ``query_encoder``: a query model directory replacing
    the shards' own. Ray: ``ray_address`` (None: the Ray this process is connected to, else a new local one),
    ``actor_options`` (see :class:`~.fanout.ShardSet`), ``searcher`` (the shard actor class), ``shared``: name
    the shard actors after the directories so other processes (e.g. Ray Serve replicas) use the same ones.
    Starting waits for every shard to open (ValueError when one cannot, naming it).
    """

    generator_class = ShardedCandidateGenerator
    collection: ShardedCollection

    def __init__(self, shards: Union[PathLike, Sequence[PathLike]], cross_encoder=None, training=None, *,
                 ranker="default", llm_terms=None, settings=None, warmup: bool = True,
                 query_encoder: Optional[PathLike] = None, ray_address: Optional[str] = None,
                 actor_options: Optional[Mapping[str, Any]] = None, searcher: Type[ShardSearcher] = ShardSearcher,
                 shared: bool = False, **tuning: Any) -> None:
        dirs = shard_dirs(shards)
        for d in dirs:
            if not (d / "manifest.json").is_file():
                raise ValueError(f"shard {d} is not a medretrieve collection (no manifest.json)")
        self.shard_set = ShardSet(dirs, actor_options, searcher,
                                  name_prefix=default_name_prefix(dirs) if shared else None, address=ray_address)
        try:
            stats = self._shard_stats()
            from ..models.encoders import QueryEncoder

            qdir = Path(query_encoder) if query_encoder is not None else dirs[0] / (
                stats[0]["query_encoder"] or stats[0]["encoder"])["dir"]
            encoder = QueryEncoder.from_dir(qdir)
            if encoder.dim != stats[0]["dim"]:
                raise ValueError(f"query encoder {qdir} gives {encoder.dim}-dim vectors but the shards hold "
                                 f"{stats[0]['dim']}-dim vectors")
            summed = GlobalStats(chunks=sum(s["chunks"] for s in stats), documents=sum(s["documents"] for s in stats),
                                 bm25_rows=sum(s["bm25_rows"] for s in stats),
                                 bm25_tokens=sum(s["bm25_tokens"] for s in stats), k1=stats[0]["k1"],
                                 b=stats[0]["b"], labels=frozenset(x for s in stats for x in s["labels"]),
                                 dim=stats[0]["dim"])
            models = {"encoder": stats[0]["encoder"], "query_encoder": stats[0]["query_encoder"],
                      "index": {"normalized": stats[0]["normalized"]}}
            super().__init__(ShardedCollection(self.shard_set, summed, encoder, models, str(qdir)), cross_encoder,
                             training, ranker=ranker, llm_terms=llm_terms, settings=settings, warmup=False, **tuning)
            if warmup:
                self.warmup()
        except BaseException:
            self.shard_set.close()
            raise

    def _shard_stats(self) -> List[Dict[str, Any]]:
        out = self.shard_set.everywhere("stats")
        if out.failed:
            i, why = sorted(out.failed.items())[0]
            raise ValueError(f"shard {self.shard_set.directories[i]} could not be opened: {why}")
        stats = [out.results[i] for i in range(len(self.shard_set))]
        first = stats[0]
        for d, s in zip(self.shard_set.directories, stats):
            same = (s["encoder"]["sha256"] == first["encoder"]["sha256"]
                    and (s["query_encoder"] or {}).get("sha256") == (first["query_encoder"] or {}).get("sha256")
                    and (s["dim"], s["normalized"]) == (first["dim"], first["normalized"])
                    and (s["k1"], s["b"]) == (first["k1"], first["b"]))
            if not same:
                raise ValueError(f"shard {d} was built with another encoder or BM25 setting than "
                                 f"{self.shard_set.directories[0]}: their scores would not compare")
        return stats

    @property
    def shard_names(self) -> List[str]:
        return list(self.shard_set.names)

    def close(self) -> None:
        """Stop the shard actors this retriever started."""
        self.shard_set.close()

    def warmup(self) -> None:
        """As :meth:`Retriever.warmup`, plus one call to every shard (their first answers pay no start-up)."""
        with self.collection.session(self._pool()) as pool:
            super().warmup()
            pool.call("ping", {i: () for i in range(len(self.shard_set))})

    def _warm_pair(self) -> tuple:
        return "warm up", "A passage of typical length that warms the cross-encoder up. " * 4

    def _pool(self) -> ShardPool:
        return ShardPool(self.shard_set, self.collection.stats)

    # ------------------------------------------------------------- search
    def search(self, question: str, k: int = 10, deadline_ms: Optional[float] = 300, *,
               expand: bool = True, rerank: bool = True, diversify: Optional[bool] = None, recover: bool = True,
               route: bool = True, dense: bool = True, lexical: bool = True, feedback: Optional[bool] = None,
               per_document: Optional[int] = None, sections: Optional[Sequence[str]] = None) -> SearchResult:
        """:meth:`Retriever.search` over every shard (module docstring); ``result.shards`` says which answered."""
        pool = self._pool()
        with self.collection.session(pool):
            result = super().search(question, k, deadline_ms, expand=expand, rerank=rerank, diversify=diversify,
                                    recover=recover, route=route, dense=dense, lexical=lexical, feedback=feedback,
                                    per_document=per_document, sections=sections)
        result.shards = pool.report()
        return result

    def _gather(self, st: Any, query: Query, k: int, dl: Deadline, log: StageLog, switches: Switches,
                ranked: bool, only: Optional[List[int]]) -> Candidates:
        pool = self.collection.pool
        pool.deadline = dl
        cands = super()._gather(st, query, k, dl, log, switches, ranked, only)
        with dl.stage("fetch"):
            pool.ensure(np.concatenate([cands.fused_ids, cands.question_ids]))
        pool.fetch_hits = True  # recovery's searches fetch their hits with them
        keep = pool.known(cands.fused_ids)
        cands.fused_ids, cands.fused_scores = cands.fused_ids[keep], cands.fused_scores[keep]
        cands.question_ids = cands.question_ids[pool.known(cands.question_ids)]
        log.record("fetch", True, f"{len(cands.fused_ids)} candidates' chunks from their shards")
        left_out = len(pool.missed) + len(pool.failed)
        total = len(self.shard_set)
        log.record("shards", True, f"{total - left_out} of {total} shards answered"
                   + (f" ({len(pool.missed)} missed the deadline, {len(pool.failed)} failed)" if left_out else ""),
                   cut=bool(pool.missed))
        return cands
