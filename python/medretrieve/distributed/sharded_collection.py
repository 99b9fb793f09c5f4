"""The rows one sharded search has seen, and a collection stand-in over them for the stages after the first.

Rows of all shards are named by one integer key, ``shard << 40 | row`` (:func:`key_of`): ordered as the rows of
the shards' concatenation (shard 0's rows, then shard 1's ...), so wherever the single-collection pipeline breaks
a tie by row (RRF, BM25 ordering) a sharded search breaks it the same way as one collection holding the shards in
that order would.

:class:`ShardedSearchState` holds what one search fetched (chunks, vectors, BM25 tokens, documents' chunks) and
how each shard fared. :class:`ShardedCollection` answers the questions the retrieval
stages ask a :class:`~medretrieve.corpus.collection.Collection` (``rows[key]``, ``vectors``, ``lexical.tokens_of``,
``lexical.idf``, ``dense.search``, ...) from the state of the search running in the calling thread, fetching from
the shards what the state lacks, so rerank, MMR, weak detection and recovery run unchanged, once, over the
candidates of every shard.

A metadata filter (``Retriever.search(where=...)``): :meth:`ShardedCollection.filter_rows` checks it against the
fields of all shards and :meth:`ShardedCollection.narrowed` gives the collection seen through it, whose every
shard call carries the filter (each shard searches only its rows passing it, :mod:`.shard_filter`), so the later
stages only ever see allowed rows.
"""
from __future__ import annotations

import copy
import threading
from collections import Counter
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from ..corpus.chunk_table import ChunkRow
from ..corpus.lexical import bm25_from_counts
from ..filters import parse_filter
from ..outbound import Deadline
from .fanout import Outcome, ShardSet
from .shard_actor import distinct_terms
from .shard_filter import ShardFilter, check_filter

KEY_BITS = 40  # rows per shard below 2**40
#: the share of a search's deadline a filter's first count leaves to the stages after it (the first stage's own
#: time and what it keeps for later stages)
PASSING_RESERVE = 0.7


def key_of(shard: int, row: int) -> int:
    return (shard << KEY_BITS) | row


def split_key(key: int) -> Tuple[int, int]:
    return key >> KEY_BITS, key & ((1 << KEY_BITS) - 1)


@dataclass(frozen=True)
class GlobalStats:
    """What every shard reported at start: summed counts and the BM25 statistics of all shards together."""

    chunks: int
    documents: int
    bm25_rows: int
    bm25_tokens: int
    k1: float
    b: float
    labels: frozenset
    dim: int

    @property
    def avg_len(self) -> float:
        return self.bm25_tokens / self.bm25_rows if self.bm25_rows else 0.0


class ShardedSearchState:
    """What one sharded search knows (module docstring)."""

    def __init__(self, shards: ShardSet, stats: GlobalStats, deadline: Optional[Deadline] = None) -> None:
        self.shards = shards
        self.stats = stats
        self.deadline = deadline or Deadline(None)
        self.chunks: Dict[int, ChunkRow] = {}
        self.vectors: Dict[int, np.ndarray] = {}
        self.tokens: Dict[int, List[str]] = {}
        self.documents: Dict[str, List[int]] = {}
        self.df: Dict[str, int] = {}
        # once the candidates are fetched (ShardedFirstStage.readable), searches fetch their hits at once
        # (recovery reads every hit)
        self.fetch_hits = False
        self.answered: Set[int] = set()
        self.missed: Dict[int, str] = {}
        self.failed: Dict[int, str] = {}

    # ------------------------------------------------------------- shard calls
    def live(self) -> List[int]:
        """Shards still in this search (none that missed or failed a call of it)."""
        return [i for i in range(len(self.shards)) if i not in self.missed and i not in self.failed]

    def call(self, method: str, args: Dict[int, Tuple[Any, ...]], reserve_ms: float = 0.0) -> Outcome:
        """One fan-out within the search's deadline (keeping ``reserve_ms`` for later stages); shards that miss
        or fail are recorded and left out of the rest of the search."""
        args = {i: a for i, a in args.items() if i not in self.missed and i not in self.failed}
        if not args:
            return Outcome()
        dl = self.deadline
        timeout = None if dl.unlimited else max(dl.remaining_ms() - reserve_ms, 0.0) / 1000.0
        out = self.shards.call(method, args, timeout)
        self.answered.update(out.results)
        for i in out.missed:
            self.missed[i] = f"no answer to {method} within {dl.elapsed_ms():.0f} ms of the search"
        self.failed.update(out.failed)
        return out

    def report(self) -> Dict[str, Any]:
        """``SearchResult.shards``: shards whose candidates are in the result, and those left out (and why)."""
        names = self.shards.names
        left_out = set(self.missed) | set(self.failed)
        return {"answered": [names[i] for i in sorted(self.answered - left_out)],
                "missed": {names[i]: why for i, why in sorted(self.missed.items())},
                "failed": {names[i]: why for i, why in sorted(self.failed.items())},
                "total": len(names)}

    # ------------------------------------------------------------- rows
    def ensure(self, keys: Union[Sequence[int], np.ndarray]) -> None:
        """Fetch what the state lacks of ``keys`` (one call per owning shard, all at once)."""
        need = {i: sorted(set(rows)) for i, rows in self.missing_by_shard(keys).items()}
        if not need:
            return
        out = self.call("fetch", {i: (rows,) for i, rows in need.items()})
        for shard, payload in out.results.items():
            self.add(shard, payload)

    def missing_by_shard(self, keys: Union[Sequence[int], np.ndarray]) -> Dict[int, List[int]]:
        """Rows of ``keys`` the state lacks, by shard."""
        need: Dict[int, List[int]] = {}
        for key in np.asarray(keys, dtype=np.int64).reshape(-1).tolist():
            if key not in self.chunks:
                shard, row = split_key(key)
                need.setdefault(shard, []).append(row)
        return need

    def add(self, shard: int, payload: Dict[str, Any]) -> None:
        """Keep the :meth:`~.shard_actor.ShardSearcher.fetch` payload of a shard."""
        for j, row in enumerate(payload["rows"]):
            key = key_of(shard, int(row))
            self.chunks[key] = ChunkRow(**payload["chunks"][j])
            self.vectors[key] = np.asarray(payload["vectors"][j], dtype=np.float32)
            self.tokens[key] = payload["tokens"][j]
        for doc, members in payload["documents"].items():
            keys = [key_of(shard, int(r)) for r, _ in members]
            self.documents[doc] = keys
            for key, (_, toks) in zip(keys, members):
                self.tokens.setdefault(key, toks)

    def known(self, keys: Union[Sequence[int], np.ndarray]) -> np.ndarray:
        """Which of ``keys`` the state holds (the others' shards missed or failed the fetch)."""
        return np.array([int(k) in self.chunks for k in np.asarray(keys).reshape(-1).tolist()], dtype=bool)

    # ------------------------------------------------------------- BM25 with every shard's statistics
    def bm25(self, tokens: Sequence[str], tf: np.ndarray, lengths: np.ndarray) -> np.ndarray:
        """Scores of rows from their counts of ``tokens``' distinct terms, with the statistics of all shards."""
        distinct = distinct_terms(tokens)
        times = [list(tokens).count(t) for t in distinct]
        df = np.array([self.df.get(t, 0) for t in distinct], dtype=np.int64)
        s = self.stats
        return bm25_from_counts(times, tf, lengths, df, s.bm25_rows, s.avg_len, s.k1, s.b)

    def document_frequencies(self, tokens: Sequence[str]) -> np.ndarray:
        """Summed over the shards (asked once per term per search)."""
        missing = [t for t in dict.fromkeys(tokens) if t not in self.df]
        if missing:
            out = self.call("document_frequencies", {i: (missing,) for i in self.live()})
            for t in missing:
                self.df[t] = sum(r.get(t, 0) for r in out.results.values())
        return np.array([self.df.get(t, 0) for t in tokens], dtype=np.int64)


class _Rows:
    def __init__(self, owner: "ShardedCollection") -> None:
        self._owner = owner

    def __getitem__(self, key: int) -> ChunkRow:
        state = self._owner.state
        key = int(key)
        if key not in state.chunks:
            state.ensure([key])
        if key not in state.chunks:
            raise KeyError(f"row {split_key(key)} of shard {state.shards.names[split_key(key)[0]]} could not be "
                           "fetched within the deadline")
        return state.chunks[key]


class _AllAlive:
    """``alive`` of the stand-in: every row a shard returns is live (shards filter their deleted rows)."""

    def __init__(self, owner: "ShardedCollection") -> None:
        self._owner = owner

    def __getitem__(self, keys: Any) -> Any:
        if np.ndim(keys) == 0:
            return True
        return np.ones(len(np.asarray(keys).reshape(-1)), dtype=bool)

    def any(self) -> bool:
        return self._owner.stats.chunks > 0

    def sum(self) -> int:
        """The live rows of every shard."""
        return self._owner.stats.chunks


class _Passing(_AllAlive):
    """``alive`` of the stand-in seen through a filter (:meth:`ShardedCollection.filter_rows`): every row a shard
    returns passes (the shards filter); how many pass and their labels are asked of the shards when first read
    and kept once every shard answered."""

    def __init__(self, owner: "ShardedCollection", where: ShardFilter) -> None:
        super().__init__(owner)
        self.where = where
        self._known: Optional[Tuple[int, frozenset]] = None

    def counts(self) -> Tuple[int, frozenset]:
        """(rows passing, the labels they carry) over the shards of the running search that answered."""
        if self._known is not None:
            return self._known
        state = self._owner.state
        dl = state.deadline
        # a short wait: a shard that misses it is counted as none this time but still searched (its count matters
        # to the stage log and section routing only; the shard filters its rows either way)
        wait_s = None if dl.unlimited else max(dl.remaining_ms() - dl.share_ms(PASSING_RESERVE), 0.0) / 1000.0
        out = state.shards.call("passing", {i: (self.where,) for i in state.live()}, wait_s)
        got = (sum(r["rows"] for r in out.results.values()),
               frozenset(x for r in out.results.values() for x in r["labels"]))
        if len(out.results) == len(state.shards):  # every shard counted: true for every later search too
            self._known = got
        return got

    def any(self) -> bool:
        return self.counts()[0] > 0

    def sum(self) -> int:
        return self.counts()[0]


class _LabelMask:
    """``allowed(labels)`` of the stand-in: the rows carrying one of ``labels`` (and passing its filter), which
    the shards filter by."""

    def __init__(self, owner: "ShardedCollection", labels: Sequence[int]) -> None:
        self._owner = owner
        self.labels = sorted({int(x) for x in labels})

    def any(self) -> bool:
        alive = self._owner.alive
        held = alive.counts()[1] if isinstance(alive, _Passing) else self._owner.stats.labels
        return self._owner.stats.chunks > 0 and bool(set(self.labels) & held)


class _Lexical:
    def __init__(self, owner: "ShardedCollection") -> None:
        self._owner = owner

    def tokens_of(self, key: int) -> Optional[List[str]]:
        state = self._owner.state
        if int(key) not in state.tokens:
            state.ensure([key])
        return state.tokens.get(int(key))

    def idf(self, tokens: Sequence[str]) -> np.ndarray:
        """As ``LexicalIndex.idf``, over the rows of every shard."""
        d = self._owner.state.document_frequencies(list(tokens)).astype(np.float64)
        n = self._owner.stats.bm25_rows
        return np.log1p((n - d + 0.5) / (d + 0.5))

    def scores_for(self, query: Union[Sequence[str], np.ndarray], keys: Sequence[int]) -> np.ndarray:
        """BM25 scores of ``keys`` for the query tokens with the statistics of every shard, counted over the rows'
        stored tokens (no score vector over every row exists here: TypeError for one)."""
        if isinstance(query, np.ndarray):
            raise TypeError("a sharded collection scores BM25 query tokens, not a score vector over every row")
        state = self._owner.state
        tokens = list(query)
        keys = [int(k) for k in np.asarray(keys).reshape(-1).tolist()]
        if not keys:
            return np.zeros(0, dtype=np.float32)
        state.ensure(keys)
        distinct = distinct_terms(tokens)
        tf = np.zeros((len(keys), len(distinct)), dtype=np.int32)
        lengths = np.zeros(len(keys), dtype=np.int64)
        for i, key in enumerate(keys):
            held = state.tokens.get(key)
            if held is not None:
                counts = Counter(held)
                tf[i] = [counts.get(t, 0) for t in distinct]
                lengths[i] = len(held)
        state.document_frequencies(distinct)
        return state.bm25(tokens, tf, lengths)

    def search(self, tokens: Sequence[str], k: int = 10, allowed: Any = None) -> Tuple[np.ndarray, np.ndarray]:
        """BM25 over every shard (recovery's relaxed and expanded queries), within ``allowed``'s labels when it
        is a :meth:`ShardedCollection.allowed` mask; its rows fetched into the state."""
        labels = allowed.labels if isinstance(allowed, _LabelMask) else None
        ids, scores = self._owner.lexical_lists([list(tokens)], k, labels)[0]  # within the owner's filter
        state = self._owner.state
        state.ensure(ids)
        known = state.known(ids)  # a shard that missed the fetch drops out with its rows
        return ids[known], scores[known]


class _Dense:
    def __init__(self, owner: "ShardedCollection") -> None:
        self._owner = owner

    def search(self, vectors: np.ndarray, k: int, ef: Any = None, labels: Optional[List[int]] = None,
               fetch_along: Optional[np.ndarray] = None) -> Tuple[np.ndarray, np.ndarray]:
        """HNSW search on every shard, merged by score: ``(keys [n, <=k], scores)``. With ``fetch_along`` (keys
        the caller reads next) or once the search's candidates are fetched (``state.fetch_hits``), the hits' rows
        and those of ``fetch_along`` come back in the same call."""
        owner, state = self._owner, self._owner.state
        q = np.asarray(vectors, dtype=np.float32).reshape(-1, owner.stats.dim)
        efs = np.broadcast_to(np.asarray(ef if ef is not None else k, dtype=np.int64), (len(q),)).tolist()
        replies = None
        if fetch_along is not None or state.fetch_hits:  # one round trip: the search and the rows
            along = state.missing_by_shard(fetch_along if fetch_along is not None else [])
            out = state.call("dense_and_fetch", {i: (q, k, efs, labels, along.get(i, []), owner.where)
                                                 for i in state.live()})
            for shard, reply in out.results.items():
                state.add(shard, reply["rows"])
            replies = {i: r["dense"] for i, r in out.results.items()}
        lists = owner.dense_lists(q, k, efs, labels, replies=replies)
        width = max([len(ids) for ids, _ in lists] + [0])
        ids_out = np.full((len(q), width), -1, dtype=np.int64)
        sc_out = np.full((len(q), width), -np.inf, dtype=np.float32)
        for i, (ids, sc) in enumerate(lists):
            ids_out[i, :len(ids)], sc_out[i, :len(ids)] = ids, sc
        return ids_out, sc_out


class ShardedCollection:
    """A :class:`~medretrieve.corpus.collection.Collection` stand-in over every shard (module docstring); the rows
    it answers for are those of the search running in the calling thread (:meth:`session`)."""

    def __init__(self, shards: ShardSet, stats: GlobalStats, query_encoder, manifest: Dict[str, Any],
                 query_encoder_dir: str, metadata_fields: Optional[Dict[str, str]] = None) -> None:
        self.shards = shards
        self.stats = stats
        self._fields = dict(metadata_fields or {})
        self.where: Optional[ShardFilter] = None  # the filter every shard call carries (a narrowed view's)
        self.unfiltered = self  # the collection a narrowed view sees through its filter
        self._query_encoder = query_encoder
        # what the default ranker reads to pick its encoder-matched or portable form (retrieval.shipped_ranker)
        self.manifest = manifest
        self.query_encoder_dir = query_encoder_dir
        self._local = threading.local()
        self._bind(_AllAlive(self))

    def _bind(self, alive: _AllAlive) -> None:
        self.rows = _Rows(self)
        self.alive = alive
        self.lexical = _Lexical(self)
        self.dense = _Dense(self)

    # ------------------------------------------------------------- metadata filters
    @property
    def metadata_fields(self) -> Dict[str, str]:
        """The fields of all shards' documents, name -> type (:func:`~.shard_filter.merge_fields`)."""
        return dict(self._fields)

    def filter_rows(self, where: Any) -> _Passing:
        """The live rows passing the metadata filter ``where`` (text, JSON or parsed), as the shards will filter
        them (``sum()``: how many, asked of the shards when read); FilterError (a ValueError) naming an unknown
        field or an ill-typed comparison, checked here against every shard's fields before any shard is asked."""
        parsed = parse_filter(where)
        check_filter(parsed, self._fields)
        return _Passing(self, (parsed.text(), dict(self._fields)))

    def narrowed(self, rows: _Passing) -> "ShardedCollection":
        """The collection seen through ``rows``' filter (:meth:`filter_rows`): the same shards, search state and
        statistics, every shard call carrying the filter."""
        view = copy.copy(self)  # shares the thread's search state (_local) and the shards
        view.where = rows.where
        view._bind(rows)
        return view

    @contextmanager
    def session(self, state: ShardedSearchState) -> Iterator[ShardedSearchState]:
        """Make ``state`` the calling thread's search state for the block."""
        before = getattr(self._local, "state", None)
        self._local.state = state
        try:
            yield state
        finally:
            self._local.state = before

    @property
    def state(self) -> ShardedSearchState:
        state = getattr(self._local, "state", None)
        if state is None:
            raise RuntimeError("no sharded search is running in this thread (use ShardedRetriever.search)")
        return state

    # ------------------------------------------------------------- what the stages ask a collection
    def __len__(self) -> int:
        return self.stats.chunks

    @property
    def n_documents(self) -> int:
        return self.stats.documents

    @property
    def dim(self) -> int:
        return self.stats.dim

    def vectors(self, keys: Sequence[int]) -> np.ndarray:
        keys = [int(k) for k in np.asarray(keys).reshape(-1).tolist()]
        if not keys:
            return np.zeros((0, self.dim), dtype=np.float32)
        state = self.state
        state.ensure(keys)
        return np.stack([state.vectors.get(k, np.zeros(self.dim, dtype=np.float32)) for k in keys])

    def document_rows(self, document_id: str) -> List[int]:
        return list(self.state.documents.get(document_id, []))

    @property
    def normalized(self) -> bool:
        """Whether the shards' vectors are unit length (their manifests agree: ShardedRetriever checks)."""
        return bool(self.manifest["index"]["normalized"])

    def allowed(self, labels: Sequence[int]) -> _LabelMask:
        """The rows carrying one of ``labels`` (the shards apply the filter)."""
        return _LabelMask(self, labels)

    def parent(self, parent_id: str) -> None:
        """The section of a chunk: kept on its shard and not fetched (a round trip per hit for every search), so
        the hits of a sharded search carry no ``span``."""
        return None

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        enc = self._query_encoder
        if len(texts) == 1:
            return np.asarray(enc.encode_query(texts[0]), dtype=np.float32)[None, :]
        return np.asarray(enc.encode(list(texts)), dtype=np.float32)

    # ------------------------------------------------------------- merged lists
    def dense_lists(self, q: np.ndarray, k: int, efs: Sequence[int], labels: Optional[List[int]],
                    reserve_ms: float = 0.0, replies: Optional[Dict[int, Any]] = None
                    ) -> List[Tuple[np.ndarray, np.ndarray]]:
        """Per query vector, every shard's best ``k`` merged by inner product (ties: smaller key)."""
        state = self.state
        if replies is None:
            replies = state.call("dense", {i: (q, k, list(efs), labels, self.where) for i in state.live()},
                                 reserve_ms).results
        out = []
        for j in range(len(q)):
            keys, scores = [], []
            for shard, lists in replies.items():
                part = lists[j]
                keys.append(np.asarray(part["ids"], dtype=np.int64) | (shard << KEY_BITS))
                scores.append(np.asarray(part["scores"], dtype=np.float32))
            out.append(_best(np.concatenate(keys) if keys else np.zeros(0, np.int64),
                             np.concatenate(scores) if scores else np.zeros(0, np.float32), k))
        return out

    def lexical_lists(self, queries: Sequence[List[str]], k: int, labels: Optional[List[int]],
                      reserve_ms: float = 0.0, replies: Optional[Dict[int, Any]] = None
                      ) -> List[Tuple[np.ndarray, np.ndarray]]:
        """Per BM25 query, every shard's candidates scored with the statistics of all shards, best ``k``
        (rows scoring 0 left out, ties: smaller key, as ``LexicalIndex.top`` orders rows)."""
        state = self.state
        if replies is None:
            depth = 2 * k  # a shard's own statistics differ a little: look deeper, keep the best k of all
            replies = state.call("lexical", {i: (queries, depth, labels, self.where) for i in state.live()},
                                 reserve_ms).results
        _sum_df(state, replies)
        out = []
        for j, tokens in enumerate(queries):
            keys, scores = [], []
            for shard, reply in replies.items():
                part = reply["lists"][j]
                keys.append(np.asarray(part["ids"], dtype=np.int64) | (shard << KEY_BITS))
                scores.append(state.bm25(tokens, part["tf"], part["lengths"]))
            ks = np.concatenate(keys) if keys else np.zeros(0, np.int64)
            ss = np.concatenate(scores) if scores else np.zeros(0, np.float32)
            ok = ss > 0
            out.append(_best(ks[ok], ss[ok], k))
        return out


def _sum_df(state: ShardedSearchState, replies: Dict[int, Any]) -> None:
    """The document frequencies of the terms the shards reported, summed over them."""
    terms: Dict[str, int] = {}
    for reply in replies.values():
        for t, d in reply["df"].items():
            terms[t] = terms.get(t, 0) + int(d)
    state.df.update(terms)


def _best(keys: np.ndarray, scores: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
    """The ``k`` best by score, ties by smaller key."""
    order = np.lexsort((keys, -scores.astype(np.float64)))[:k]
    return keys[order], scores[order]
