"""A metadata-filtered search: the collection a search reads narrowed to the rows that pass its filter.

:class:`FilteredCollection` is the collection snapshot seen through a row mask (``alive``: the live rows that pass,
``allowed(labels)``: those also carrying a label), so every stage that reads live rows honours the filter without
knowing of it: BM25 scores only allowed rows (``lexical.top(..., allowed=alive)``), recovery and feedback search
through the first stage over it, MMR and the rerank read only the candidates it gave. Its ``dense`` is
:class:`FilteredDense`: the index's own row filter (``search(allowed=)``: the graph walk keeps only allowed rows
and the index's planner scans them exactly when few pass; from the view's second search on, the HNSW index's
compiled filter, built in the background: ``Index.compile_filter``) where the native core reads bitsets; else the
graph walked with an over-fetch when many rows pass (kept if it found ``k`` allowed rows), else (under 10% of the
rows or 4096 of them) an exact scan of the allowed rows' stored vectors. Either way a result short of allowed rows
is scanned exactly, so a filter never returns fewer than ``k`` hits when ``k`` rows pass and never a row that fails
it.
"""
from __future__ import annotations

import logging
import math
import threading
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np

from ..index import FlatIndex, Index, pack_allowed
from ..index.allowed import NATIVE_BITSET
from .collection_view import SearchableCollection
from .compiled_filters import COMPILED

#: under this share of the rows passing, the dense search scans the allowed rows exactly (the graph walk would
#: need an over-fetch of 1 / share to find them, and loses recall on correlated filters)
EXACT_SHARE = 0.1
#: at most this many allowed rows are scanned exactly whatever their share (a scan of 4096 x 768 int8 rows costs
#: about what a graph walk at a high ef does)
EXACT_ROWS = 4096
#: the name of the thread that compiles a filter searched twice (FilteredDense.row_filter)
COMPILE_THREAD = "medretrieve-compile-filter"
#: allowed rows whose vectors one exact scan reads at a time (bounds its memory: 8192 x 768 floats = 24 MiB)
SCAN_BLOCK = 8192


class FilteredDense:
    """The dense index over the rows of ``mask`` (the collection's live rows passing a filter): the native
    ``search(vectors, k, ef, labels)`` API, ids -1 / scores -inf where fewer rows pass."""

    def __init__(self, collection: SearchableCollection, mask: np.ndarray) -> None:
        self.collection = collection
        self.mask = mask
        self.n_rows = max(len(mask), 1)
        # the native row filter (the index's search(allowed=), a core that reads the bitset): used when present;
        # otherwise the over-fetch or the exact scan below
        self.native = NATIVE_BITSET and isinstance(collection.dense, (Index, FlatIndex))
        self._bitset: Optional[np.ndarray] = None
        self._label_masks: Dict[Tuple[int, ...], np.ndarray] = {}
        self._searches = 0  # through row_filter: the second one compiles the filter
        self._compile_lock = threading.Lock()

    def allowed(self, labels: Optional[Sequence[int]]) -> np.ndarray:
        if labels is None:
            return self.mask
        key = tuple(sorted({int(x) for x in labels}))
        got = self._label_masks.get(key)
        if got is None:
            got = self._label_masks[key] = self.mask & self.collection.allowed(key)
        return got

    def search(self, vectors: np.ndarray, k: int, ef: Any = None, labels: Optional[List[int]] = None
               ) -> Tuple[np.ndarray, np.ndarray]:
        vectors = np.asarray(vectors, dtype=np.float32).reshape(-1, self.collection.dim)
        allowed = self.allowed(labels)
        n_allowed = int(allowed.sum())
        ids = np.full((len(vectors), k), -1, dtype=np.int64)
        scores = np.full((len(vectors), k), -np.inf, dtype=np.float32)
        if n_allowed == 0 or k <= 0:
            return ids, scores
        share = n_allowed / self.n_rows
        want = min(k, n_allowed)
        exact = list(range(len(vectors)))
        if self.native:  # the index walks with the bitset itself and plans its own exact scans
            got, got_scores = self.collection.dense.search(vectors, k=k, ef=ef, labels=labels,
                                                           allowed=self.row_filter())
            exact = self._keep(np.asarray(got, dtype=np.int64).reshape(len(vectors), -1),
                               np.asarray(got_scores, dtype=np.float32).reshape(len(vectors), -1),
                               allowed, k, want, ids, scores)
        elif share >= EXACT_SHARE and n_allowed > EXACT_ROWS:
            fetch = min(self.n_rows, int(math.ceil(k / share * 1.5)) + 10)
            efs = np.maximum(np.broadcast_to(np.asarray(ef if ef is not None else fetch), (len(vectors),)), fetch)
            got, got_scores = self.collection.dense.search(vectors, k=fetch, ef=efs.astype(np.int64),
                                                           labels=labels)
            exact = self._keep(np.asarray(got, dtype=np.int64).reshape(len(vectors), -1),
                               np.asarray(got_scores, dtype=np.float32).reshape(len(vectors), -1),
                               allowed, k, want, ids, scores)
        if exact:
            rows = np.flatnonzero(allowed)
            found, found_scores = self._scan(vectors[exact], rows, want)
            ids[exact, :want], scores[exact, :want] = found, found_scores
        return ids, scores

    @staticmethod
    def _keep(got: np.ndarray, got_scores: np.ndarray, allowed: np.ndarray, k: int, want: int, ids: np.ndarray,
              scores: np.ndarray) -> List[int]:
        """Copy each query's allowed rows of an index result into ``ids`` / ``scores``; the queries whose result
        held fewer than ``want`` of them (to be scanned exactly instead)."""
        short = []
        for i in range(len(got)):
            ok = got[i] >= 0
            ok[ok] = allowed[got[i][ok]]
            kept, kept_scores = got[i][ok][:k], got_scores[i][ok][:k]
            if len(kept) < want:
                short.append(i)
                continue
            ids[i, :len(kept)], scores[i, :len(kept)] = kept, kept_scores
        return short

    def bitset(self) -> np.ndarray:
        """The mask packed as the index's row filter (built once per filtered view, i.e. per filter and version)."""
        if self._bitset is None:
            self._bitset = pack_allowed(self.mask)
        return self._bitset

    def row_filter(self) -> Any:
        """The filter as the index reads it: the packed bitset, or the HNSW index's compiled filter once it is
        ready. A view lives as long as its filter and version in the retriever's cache, so a filter searched twice
        is compiled (``Index.compile_filter``, 20-30 ms for 11,000 of 112,511 rows) on a background thread: no search
        waits for it, and a filter searched once costs nothing more; a process that exits meanwhile waits for it
        (a daemon thread would be stopped inside the native compile: an abort). The compiled filters of all views
        are bounded in bytes (``compiled_filters.COMPILED``); one let go is not compiled again."""
        compiled = COMPILED.get(self)
        if compiled is not None:
            return compiled
        dense = self.collection.dense
        if isinstance(dense, Index):
            with self._compile_lock:
                self._searches += 1
                start = self._searches == 2
            if start:  # not a daemon: the interpreter's exit waits for it rather than stopping it in native code
                threading.Thread(target=self._compile, args=(dense,), name=COMPILE_THREAD).start()
        return self.bitset()

    def _compile(self, dense: Index) -> None:
        try:
            COMPILED.keep(self, dense.compile_filter(self.bitset()))
        except Exception as exc:  # the bitset it had answers on, the same rows
            logging.getLogger(__name__).warning("could not compile a row filter of %d rows: %s",
                                                int(self.mask.sum()), exc)

    def _scan(self, queries: np.ndarray, rows: np.ndarray, k: int) -> Tuple[np.ndarray, np.ndarray]:
        """Exact top ``k`` of ``rows`` for each query by the stored vectors' inner product (the collection's
        space), best first."""
        best_ids = np.zeros((len(queries), 0), dtype=np.int64)
        best = np.zeros((len(queries), 0), dtype=np.float32)
        for a in range(0, len(rows), SCAN_BLOCK):
            block = rows[a:a + SCAN_BLOCK]
            sims = queries @ self.collection.vectors(cast(Sequence[int], block)).T
            best = np.concatenate([best, sims.astype(np.float32)], axis=1)
            best_ids = np.concatenate([best_ids, np.broadcast_to(block, (len(queries), len(block)))], axis=1)
            if best.shape[1] > k:
                keep = np.argpartition(-best, k - 1, axis=1)[:, :k]
                best = np.take_along_axis(best, keep, axis=1)
                best_ids = np.take_along_axis(best_ids, keep, axis=1)
        order = np.argsort(-best, axis=1, kind="stable")
        return np.take_along_axis(best_ids, order, axis=1), np.take_along_axis(best, order, axis=1)


class FilteredCollection:
    """A collection snapshot seen through a row mask (module docstring); everything but the row sets and the
    dense index is the snapshot's own."""

    def __init__(self, base: SearchableCollection, mask: np.ndarray, where: str) -> None:
        self.base = base
        self.where = where  # the filter's canonical text (the stage log names it)
        self._mask = mask
        self._dense = FilteredDense(base, mask)

    @property
    def alive(self) -> np.ndarray:
        return self._mask

    def allowed(self, labels: Sequence[int]) -> np.ndarray:
        return self._dense.allowed(labels)

    @property
    def dense(self) -> FilteredDense:
        return self._dense

    @property
    def rows(self) -> Any:
        return self.base.rows

    @property
    def lexical(self) -> Any:
        return self.base.lexical

    @property
    def manifest(self) -> Dict[str, Any]:
        return self.base.manifest

    @property
    def query_encoder_dir(self) -> str:
        return self.base.query_encoder_dir

    @property
    def n_documents(self) -> int:
        return self.base.n_documents

    @property
    def dim(self) -> int:
        return self.base.dim

    @property
    def normalized(self) -> bool:
        return self.base.normalized

    def __len__(self) -> int:
        return len(self.base)

    def vectors(self, rows: Sequence[int]) -> np.ndarray:
        return self.base.vectors(rows)

    def document_rows(self, document_id: str) -> List[int]:
        return self.base.document_rows(document_id)

    def parent(self, parent_id: str) -> Any:
        return self.base.parent(parent_id)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.base.encode_queries(texts)

    def article_encoder(self) -> Any:
        return self.base.article_encoder()

    def __getattr__(self, name: str) -> Any:  # the snapshot's other members (labels, sections, metadata)
        if name.startswith("__") or name == "base":
            raise AttributeError(name)
        return getattr(self.base, name)
