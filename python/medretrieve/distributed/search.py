"""Sharded search: one question fanned out to every shard under the request's deadline, one rerank over all.

:class:`ShardedRetriever` is a :class:`~medretrieve.retrieval.retriever.Retriever` (same ``search`` signature,
same :class:`~medretrieve.retrieval.results.SearchResult`, usable wherever a Retriever is) whose collection is
many shard collections, each held by a Ray actor (:class:`~.shard_actor.ShardSearcher`, memory-mapped). A search:

1. analyses and expands the question and encodes it once, here (the query encoder of the shards' manifests);
2. ``shards``: one call to every shard runs the dense and BM25 first stage there (the retriever's first stage is
   :class:`~.first_stage.ShardedFirstStage`); it waits until the deadline less
   the 35% the later stages keep. Dense lists merge by inner product; BM25 lists are scored again here from each
   row's term counts with the statistics of all shards (document frequencies summed, the average length of all
   rows), so they merge as if one index held every shard (:func:`~medretrieve.corpus.lexical.bm25_from_counts`);
3. pseudo-relevance feedback (the chunks of the best 10 rows of each shard's own lists came back with step 2; its
   search fans out and brings back, in the same call, the chunks of its hits and of the candidates fused so far),
   RRF fusion, then ``fetch``: whatever the fused candidates still lack (chunks, vectors, tokens, documents) from
   their shards. Two round trips to each shard in most searches;
4. rerank, MMR, pruning, weak detection and recovery run once, over every shard's candidates, unchanged
   (:class:`~.sharded_collection.ShardedCollection` answers their questions from what was fetched; recovery's extra searches
   fan out too).

A metadata filter (``where``; retracted articles left out by default where the shards' documents carry
``retracted``) is checked here against the fields of all shards (:mod:`.shard_filter`) and travels with every
shard call: each shard searches only its rows passing it, so the first stage, feedback, the rerank, MMR and
recovery's extra searches only ever see allowed rows, as in one filtered collection. :meth:`ShardedRetriever.facets`
sums the shards' facet counts.

A shard that misses a call's deadline or fails (its actor died; Ray restarts it for later searches) is left out of
the rest of that search: the result holds the other shards' hits, ``result.shards`` says which shards answered,
which missed and which failed, ``result.partial`` is True and the ``shards`` stage is marked cut.

Ties: rows are keyed ``shard << 40 | row`` (:mod:`.sharded_collection`), so over shards built from a corpus split in order the
hits equal those of one collection of the shards concatenated (the tests check this on a small corpus).
"""
from __future__ import annotations

import numbers
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Type, Union

from ..filters import FilterError
from ..outbound import Deadline
from ..retrieval.collection_view import CollectionView
from ..retrieval.first_stage import FirstStage
from ..retrieval.results import SearchResult
from ..retrieval.retriever import Retriever, effective_filter
from .fanout import ShardSet, default_name_prefix
from .first_stage import ShardedFirstStage
from .shard_filter import check_filter, merge_fields, sum_facets
from .sharded_collection import GlobalStats, ShardedCollection, ShardedSearchState
from .shard_actor import ShardSearcher
from ..wire import (DEFAULT_DEADLINE_MS, DEFAULT_K, SearchOptionTypeError, SearchOptionValueError,
                    check_search_options)
from .layout import PathLike, shard_dirs

FACETS_TIMEOUT_MS = 60_000.0  # the longest a facet count waits for the shards (each counts its documents once)

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
            fields = merge_fields([s["metadata_fields"] for s in stats])
            super().__init__(ShardedCollection(self.shard_set, summed, encoder, models, str(qdir), fields),
                             cross_encoder, training, ranker=ranker, llm_terms=llm_terms, settings=settings,
                             warmup=False, first_stage=self._sharded_first_stage, **tuning)
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

    def warmup(self, freeze_gc: bool = False) -> None:
        """As :meth:`Retriever.warmup`, plus one call to every shard (their first answers pay no start-up)."""
        with self.collection.session(self._search_state()) as state:
            super().warmup(freeze_gc)
            state.call("ping", {i: () for i in range(len(self.shard_set))})

    def warm_pair(self) -> tuple:
        return "warm up", "A passage of typical length that warms the cross-encoder up. " * 4

    def _sharded_first_stage(self, collection: CollectionView) -> FirstStage:
        """The retriever's ``first_stage``: the fan-out over this retriever's shards (:mod:`.first_stage`)."""
        if not isinstance(collection, ShardedCollection) or collection.unfiltered is not self.collection:
            raise ValueError("a sharded retriever searches its own ShardedCollection only (or it through a filter)")
        return ShardedFirstStage(collection, self.settings.feedback_docs)

    def _search_state(self, deadline_ms: Optional[float] = None) -> ShardedSearchState:
        """A search's state; its shard calls wait within ``deadline_ms`` until the first stage sets the search's
        own deadline (an invalid value is left to the search's checks: no deadline here)."""
        valid = isinstance(deadline_ms, numbers.Real) and not isinstance(deadline_ms, bool) and deadline_ms >= 0
        return ShardedSearchState(self.shard_set, self.collection.stats,
                                  Deadline(float(deadline_ms) if valid else None))  # type: ignore[arg-type]

    # ------------------------------------------------------------- search
    def search(self, question: str, k: int = DEFAULT_K, deadline_ms: Optional[float] = DEFAULT_DEADLINE_MS,
               **options: Any) -> SearchResult:
        """:meth:`Retriever.search` over every shard (module docstring), with its options
        (:data:`medretrieve.wire.SEARCH_OPTIONS`); ``result.shards`` says which answered."""
        state = self._search_state(deadline_ms)
        with self.collection.session(state):
            result = super().search(question, k, deadline_ms, **options)
        result.shards = state.report()
        return result

    def facets(self, fields: Sequence[str], where: Any = None, include_retracted: Optional[bool] = None,
               top: Optional[int] = None, timeout_ms: float = FACETS_TIMEOUT_MS) -> Dict[str, Any]:
        """:meth:`Retriever.facets` over every shard: each shard counts its live documents passing the filter,
        the counts are summed (every document lives on one shard), refusals as one collection words them.
        ``timeout_ms``: how long to wait for the shards; a shard that misses it or fails makes this a RuntimeError
        naming it (counts without it would be wrong, not partial)."""
        opts = check_search_options({"where": where, "include_retracted": include_retracted})
        if isinstance(fields, str) or not fields or not all(isinstance(f, str) for f in fields):
            raise SearchOptionTypeError(f"fields must be a non-empty list of field names, got {fields!r}", "fields")
        if top is not None and (isinstance(top, bool) or not isinstance(top, int) or top < 1):
            raise SearchOptionValueError(f"top must be an integer >= 1, got {top!r}", "top")
        col = self.collection
        parsed = effective_filter(col, opts.get("where"), bool(opts.get("include_retracted")))
        try:
            check_filter(parsed, col.metadata_fields, fields)
        except FilterError as exc:
            raise SearchOptionValueError(str(exc), "where" if exc.field is None or exc.field not in fields
                                         else "fields") from None
        text = None if parsed is None else parsed.text()
        out = self.shard_set.everywhere("facets", list(fields), text, col.metadata_fields,
                                        timeout_s=timeout_ms / 1000.0)
        left_out = {self.shard_set.names[i]: why for i, why in out.failed.items()}
        left_out.update({self.shard_set.names[i]: "no answer in time" for i in out.missed})
        if left_out:
            raise RuntimeError(f"facets: shards {left_out} did not count")
        counted = [out.results[i] for i in sorted(out.results)]
        return {"documents": sum(c["documents"] for c in counted),
                "facets": sum_facets([c["facets"] for c in counted], fields, top)}
