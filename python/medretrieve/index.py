"""Vector indexes: ``Index`` (int8 / float32 HNSW, a drop-in for ``hnswlib.Index``) and ``FlatIndex`` (exact).

Both are thin wrappers over the native core (``medretrieve._core``): this module only normalises inputs (dtype,
contiguity, 1-d rows, ids, label lists) and converts result conventions; every loop runs natively with the GIL
released.

Storage (``dtype``):

* ``"float32"``: vectors stored as given (cosine: normalised).
* ``"int8"``: scalar quantization ``x ~= c + s * code`` with a trained per-dimension centre ``c`` (the mean of the
  first add batch, up to 100k rows, or of ``train()``'s sample; a first batch under 256 rows without ``train()``
  leaves ``c = 0``) and one symmetric scale ``s`` per vector. Centring removes the offset embedding models share
  across vectors, so the 8 bits cover what differs between them; the per-vector scale keeps absolute inner-product
  scale (MedCPT's raw scores of ~60-70 survive). It was measured against plain per-vector and
  per-dimension min/max (faiss SQ8) schemes (``bench/RESULTS.md``, "Index"). A slab is ~``dim + 160`` bytes against
  ``4 * dim + 140`` for hnswlib float32 (M=16).
* ``keep_float=True`` (int8 only) also keeps the float32 rows (``4 * dim`` bytes more per vector) and re-scores the
  final ``ef`` candidates exactly before taking the top ``k`` (recall recovery).

Scores: the native API (``search``) returns similarities, higher is better: inner product for ``ip``/``cosine``,
negative squared L2 for ``l2``. The hnswlib API (``knn_query``) returns hnswlib's distances: ``1 - ip``,
``1 - cos`` and squared L2.

Ids: integers in ``[0, 2**63 - 1]``, for every call that takes them (``add``, ``add_items`` with or without
``replace_deleted``, ``mark_deleted``, ``get_items``...). ``search`` returns ids as int64 with ``-1`` as padding, so a
larger id could only come back negative; it is a ``ValueError`` instead (hnswlib takes any uint64). Ids that are not
integers (floats, even integral-valued ones, which lose precision above 2**53; bools; object arrays) are a
``TypeError``. Python ints of any size are converted exactly.

k: a search returns ``k`` results per query, padded with id ``-1`` (score ``-inf``; hnswlib's ``knn_query`` raises
instead) when fewer exist. ``k`` (and ``search_mmr``'s ``fetch_k``) may be at most ``max(element_count, 1024)``: a
larger ``k`` could only add padding (``k = 10**9`` would allocate 12 GB per query) and is a ``ValueError`` naming
``k``.
"""
from __future__ import annotations

import operator
import os
import threading
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import numpy as np

from . import _core

__all__ = ["Index", "FlatIndex", "IndexInputError", "IndexStats"]

_SPACES = ("l2", "ip", "cosine")
_DTYPES = ("float32", "int8")
_MAX_LABEL = 2**32 - 1
_MAX_ID = 2**63 - 1
_ID_RULE = "ids must be integers in [0, 2**63 - 1] (search returns int64 ids, with -1 as padding)"

LabelsArg = Union[None, int, Sequence[int], Sequence[Sequence[int]], np.ndarray]


class IndexInputError(ValueError, RuntimeError):
    """Bad input to an index call.

    Subclasses both ``ValueError`` (what the native API promises) and ``RuntimeError`` (what hnswlib raises for the
    same mistakes), so code written for either keeps catching it.
    """


@dataclass(frozen=True)
class IndexStats:
    """A snapshot of an index's state (``Index.stats()``); ``memory_bytes`` counts native bytes held.

    ``bytes_per_slab``: bytes of one element's slab (level-0 links, label signature, int8 scale and norm term,
    code); ``link_bits``: the width of each level-0 link id in it, the bits ``max_elements`` needs (at least 16;
    32 in files of format versions 1-2), widened when the index grows past a power of two.
    """

    space: str
    dtype: str
    dim: int
    M: int
    ef_construction: int
    ef: int
    count: int
    deleted: int
    max_elements: int
    max_level: int
    keep_float: bool
    prune_alpha: float
    read_only: bool
    memory_bytes: int
    bytes_per_slab: int
    link_bits: int
    simd_level: str


# ---------------------------------------------------------------------------
# input normalisation


def _as_rows(data: Any, dim: int, what: str = "vectors") -> np.ndarray:
    """C-contiguous float32 rows of width ``dim`` (1-d = one row). NaN / inf are rejected natively."""
    if type(data) is np.ndarray and data.dtype == np.float32 and data.flags.c_contiguous and data.ndim in (1, 2):
        arr = data  # fast path for the latency-critical single query: no copy, no reshape
    else:
        arr = np.asarray(data)
        if arr.dtype.kind not in "fiu":
            raise TypeError(f"{what} must be a numeric array (float or int), got dtype {arr.dtype}")
        if arr.ndim not in (1, 2):
            raise IndexInputError(f"{what} must be a 1-d or 2-d array, got {arr.ndim} dimensions")
        if arr.dtype != np.float32:
            with np.errstate(over="ignore", invalid="ignore"):
                arr = arr.astype(np.float32)  # values beyond float32 range become inf: rejected natively
        arr = np.ascontiguousarray(arr)
    if arr.shape[-1] != dim:
        raise IndexInputError(f"Wrong dimensionality of the {what}: got {arr.shape[-1]}, the index has dim={dim}")
    return arr if arr.ndim == 2 else arr.reshape(1, -1)


def _as_ids(ids: Any, n: int) -> Optional[np.ndarray]:
    """uint64 ids, one per row, or None (default ids)."""
    return None if ids is None else _id_array(ids, n)


def _id_array(ids: Any, n: int) -> np.ndarray:
    """``n`` ids as C-contiguous uint64, checked against the id rule (module docstring, "Ids")."""
    arr = ids if isinstance(ids, np.ndarray) else _ids_from_python(ids)
    if arr.ndim == 0:
        arr = arr.reshape(1)
    if arr.ndim != 1:
        raise IndexInputError("ids must be a scalar or a 1-d sequence")
    if arr.shape[0] != n:
        raise IndexInputError(f"The input label shape {arr.shape[0]} does not match the input data vector shape {n}")
    if arr.dtype.kind not in "iu":  # floats (even integral-valued ones would round above 2**53), bools, objects
        raise TypeError(f"ids must be integers, got dtype {arr.dtype}")
    if arr.size:
        if arr.dtype.kind == "i" and arr.min() < 0:
            raise IndexInputError("ids must be non-negative integers")
        if arr.dtype.kind == "u" and int(arr.max()) > _MAX_ID:
            raise IndexInputError(f"id {int(arr.max())} is out of range: {_ID_RULE}")
    return np.ascontiguousarray(arr, dtype=np.uint64)


def _ids_from_python(ids: Any) -> np.ndarray:
    """Python ids (an int, a list, a range...) as an integer array, exactly: NumPy's own conversion when it gives
    integers, else item by item (a list mixing large and negative ints would otherwise become float64)."""
    arr = np.asarray(ids)
    if arr.dtype.kind in "iu":
        return arr
    items = [ids] if arr.ndim == 0 else list(ids)
    return np.array([_as_id(v) for v in items], dtype=np.uint64)


def _as_id(value: Any) -> int:
    """One id as a Python int, checked against the id rule."""
    if isinstance(value, (bool, np.bool_)) or isinstance(value, (float, np.floating)):
        raise TypeError(f"ids must be integers, got {type(value).__name__} {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"ids must be integers, got {type(value).__name__}") from None
    if v < 0:
        raise IndexInputError("ids must be non-negative integers")
    if v > _MAX_ID:
        raise IndexInputError(f"id {v} is out of range: {_ID_RULE}")
    return v


def _int_arg(value: Any, what: str) -> int:
    """An integer argument as a Python int: ints and NumPy integers, never bools or floats (no silent rounding)."""
    if type(value) is int:  # the common case first: every search checks k and num_threads
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{what} must be an integer, got {type(value).__name__}")
    return int(value)


def _label_list(row: Any) -> list[int]:
    if isinstance(row, (str, bytes)):
        raise TypeError("labels must be integers")
    try:
        items = [row] if isinstance(row, (int, np.integer, bool, np.bool_)) else list(row)
    except TypeError as exc:
        raise TypeError("labels must be integers or lists of integers") from exc
    vals = [_int_arg(v, "labels") for v in items]
    for v in vals:
        if v < 0 or v > _MAX_LABEL:
            raise IndexInputError(f"labels must be in [0, 2**32 - 1], got {v}")
    return vals


def _labels_csr(labels: LabelsArg, n: int) -> tuple[Optional[np.ndarray], Optional[np.ndarray]]:
    """Per-row labels -> (offsets int64 [n+1], values uint32): one int per row, a list of int lists, or None."""
    if labels is None:
        return None, None
    if isinstance(labels, np.ndarray) and labels.ndim == 1 and labels.dtype.kind in "iu":
        if labels.shape[0] != n:
            raise IndexInputError(f"labels must have one entry per row ({n}), got {labels.shape[0]}")
        if labels.size and (labels.min() < 0 or labels.max() > _MAX_LABEL):
            raise IndexInputError("labels must be in [0, 2**32 - 1]")
        return np.arange(n + 1, dtype=np.int64), np.ascontiguousarray(labels.astype(np.uint32))
    if isinstance(labels, (int, np.integer)):
        raise TypeError("labels must be a sequence with one entry (an int or a list of ints) per row")
    rows = list(labels)
    if len(rows) != n:
        raise IndexInputError(f"labels must have one entry per row ({n}), got {len(rows)}")
    lists = [_label_list(r) for r in rows]
    offsets = np.zeros(n + 1, dtype=np.int64)
    np.cumsum([len(x) for x in lists], out=offsets[1:])
    values = np.fromiter((v for x in lists for v in x), dtype=np.uint32, count=int(offsets[-1]))
    return offsets, values


def _query_labels(labels: Any) -> Optional[list[int]]:
    if labels is None:
        return None
    return _label_list(labels)


def _check_count(value: Any, what: str) -> int:
    """A positive integer argument (k, fetch_k, ef). Bounds relative to the index are checked natively."""
    v = _int_arg(value, what)
    if v < 1:
        raise IndexInputError(f"{what} must be a positive integer, got {v}")
    if v > _MAX_ID:
        raise IndexInputError(f"{what}={v} is too large")
    return v


def _check_k(k: Any) -> int:
    return _check_count(k, "k")


def _check_threads(num_threads: Any) -> int:
    """num_threads: an integer; <= 0 means every core, larger counts are capped at the hardware threads natively."""
    if num_threads is None:
        return -1
    return max(-1, min(_int_arg(num_threads, "num_threads"), 2**31 - 1))


def _as_ef(ef: Any, nq: int) -> Optional[np.ndarray]:
    if ef is None:
        return None
    if isinstance(ef, (bool, np.bool_)):
        raise TypeError("ef must be an int or an array of ints")
    arr = np.asarray(ef)
    if arr.dtype.kind == "O" and all(isinstance(v, int) and not isinstance(v, bool) for v in arr.reshape(-1)):
        raise IndexInputError("ef values must be integers in [1, 2**63 - 1]")  # Python ints beyond uint64
    if arr.dtype.kind not in "iu":
        raise TypeError("ef must be an int or an array of ints")
    arr = arr.reshape(-1)
    if arr.shape[0] not in (1, nq):
        raise IndexInputError(f"ef must be one int or one per query ({nq}), got {arr.shape[0]}")
    if arr.size and (arr < 1).any():
        raise IndexInputError("ef values must be positive")
    if arr.size and arr.dtype.kind == "u" and int(arr.max()) > _MAX_ID:
        raise IndexInputError("ef values must be integers in [1, 2**63 - 1]")
    return np.ascontiguousarray(arr.astype(np.uint64))


def _check_space(space: str) -> str:
    if space not in _SPACES:
        raise IndexInputError("Space name must be one of l2, ip, or cosine.")
    return space


def _check_dim(dim: Any) -> int:
    if isinstance(dim, bool) or not isinstance(dim, (int, np.integer)) or dim < 1:
        raise IndexInputError(f"dim must be a positive integer, got {dim!r}")
    return int(dim)


def _check_dtype(dtype: str) -> str:
    dtype = np.dtype(dtype).name if not isinstance(dtype, str) else dtype
    if dtype not in _DTYPES:
        raise IndexInputError(f"dtype must be 'float32' or 'int8', got {dtype!r}")
    return dtype


# ---------------------------------------------------------------------------
# HNSW


class Index:
    """HNSW index over float32 or int8 vectors; hnswlib-compatible plus a native API.

    hnswlib API: ``init_index``, ``add_items``, ``knn_query`` (hnswlib distances), ``set_ef``, ``save_index``,
    ``load_index``, ``mark_deleted``... Native API: ``add`` (labels, ``update``), ``search`` (similarities, per-query
    ``ef``, label filter, padded results), ``train``, ``save``, ``Index.load(path, mmap=True)``, ``stats``.
    """

    def __init__(self, space: str, dim: int) -> None:
        self._space = _check_space(space)
        self._dim = _check_dim(dim)
        self._core: Optional[Any] = None
        self._num_threads = -1

    # --- construction ---------------------------------------------------
    def init_index(
        self,
        max_elements: int,
        M: int = 16,
        ef_construction: int = 200,
        random_seed: int = 100,
        allow_replace_deleted: bool = False,
        *,
        dtype: str = "float32",
        keep_float: bool = False,
        prune_alpha: Optional[float] = None,
    ) -> None:
        """Allocates room for ``max_elements`` vectors (grow later with ``resize_index``).

        ``prune_alpha`` (1 to 2; None: the library's default, 1.05) spreads each element's links: hnswlib's rule keeps
        a candidate only if no kept link is closer to it than the element is, and a list with room left also takes the
        dropped candidates that pass the rule relaxed by this factor (on squared distances, as Vamana's alpha). 1 keeps
        to hnswlib's rule; the default buys recall per ``ef`` for a longer build. Saved with the index.
        """
        for name, v in (("max_elements", max_elements), ("M", M), ("ef_construction", ef_construction)):
            if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
                raise IndexInputError(f"{name} must be a non-negative integer, got {v!r}")
        if M < 2:
            raise IndexInputError("M must be at least 2")
        dtype = _check_dtype(dtype)
        if keep_float and dtype != "int8":
            raise IndexInputError("keep_float only applies to dtype='int8'")
        extra = {}
        if prune_alpha is not None:
            if isinstance(prune_alpha, bool) or not isinstance(prune_alpha, (int, float, np.integer, np.floating)) \
                    or not 1.0 <= float(prune_alpha) <= 2.0:
                raise IndexInputError(f"prune_alpha must be a number in [1, 2], got {prune_alpha!r}")
            extra["prune_alpha"] = float(prune_alpha)
        self._core = _core.HnswIndex(
            self._space, dtype, self._dim, int(max_elements), int(M), max(1, int(ef_construction)),
            int(random_seed) & (2**64 - 1), bool(keep_float), bool(allow_replace_deleted), **extra,
        )

    def _c(self) -> Any:
        if self._core is None:
            raise RuntimeError("Index is not initialised: call init_index() or load_index() first")
        return self._core

    # --- properties (hnswlib names) --------------------------------------
    @property
    def space(self) -> str:
        return self._space

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def dtype(self) -> str:
        return self._c().stats()["dtype"]

    @property
    def M(self) -> int:
        return self._c().stats()["M"]

    @property
    def ef_construction(self) -> int:
        return self._c().stats()["ef_construction"]

    @property
    def ef(self) -> int:
        return self._c().ef

    @ef.setter
    def ef(self, value: int) -> None:
        self.set_ef(value)

    @property
    def entry_beam(self) -> int:
        return self._c().entry_beam

    @entry_beam.setter
    def entry_beam(self, value: int) -> None:
        self.set_entry_beam(value)

    @property
    def max_elements(self) -> int:
        return 0 if self._core is None else self._core.capacity

    @property
    def element_count(self) -> int:
        return 0 if self._core is None else self._core.count

    @property
    def num_threads(self) -> int:
        return self._num_threads if self._num_threads > 0 else (os.cpu_count() or 1)

    @num_threads.setter
    def num_threads(self, value: int) -> None:
        self.set_num_threads(value)

    def set_num_threads(self, num_threads: int) -> None:
        """Default thread count for add/search calls (-1: all cores; more than the hardware threads are capped)."""
        self._num_threads = _check_threads(num_threads)

    def set_ef(self, ef: int) -> None:
        """Default efSearch (candidate list size); values below k are raised to k per query (0 is accepted, as
        in hnswlib)."""
        if isinstance(ef, bool) or not isinstance(ef, (int, np.integer)):
            raise TypeError(f"ef must be an integer, got {type(ef).__name__}")
        if ef < 0:
            raise IndexInputError(f"ef must be >= 0, got {ef}")
        self._c().set_ef(max(1, int(ef)))

    def set_entry_beam(self, beam: int) -> None:
        """Width of the beam search on layer 1 whose best ``beam`` elements seed the layer-0 search. 0 (the
        default) uses ``max(1, ef // 8)`` per query; 1 is one greedy descent, as hnswlib.
        A single descent sometimes ends in the wrong cluster, and only a much larger ef recovers; a beam of
        ef // 8 grows with the layer-0 search, so it costs a near-constant share of a query (under a tenth of
        its time) at any ef (``bench/ann.py``, ``bench/scale.py --entry-beam``, RESULTS.md). Not saved with
        the index."""
        if isinstance(beam, bool) or not isinstance(beam, (int, np.integer)):
            raise TypeError(f"entry_beam must be an integer, got {type(beam).__name__}")
        if not 0 <= beam <= 4096:
            raise IndexInputError(f"entry_beam must be in [0, 4096] (0: ef // 8), got {beam}")
        self._c().set_entry_beam(int(beam))

    def _threads(self, num_threads: Any) -> int:
        n = _check_threads(num_threads)
        return self._num_threads if n < 0 else n

    def get_current_count(self) -> int:
        return self.element_count

    def get_max_elements(self) -> int:
        return self.max_elements

    def __len__(self) -> int:
        """Live (not deleted) elements."""
        c = self._core
        return 0 if c is None else c.count - c.deleted_count

    # --- native API -----------------------------------------------------
    def train(self, sample: Any) -> None:
        """int8: sets the quantization centre from ``sample`` rows (call before the first add)."""
        self._c().train(_as_rows(sample, self._dim, "training vectors"))

    def add(
        self,
        vectors: Any,
        ids: Any = None,
        labels: LabelsArg = None,
        num_threads: int = -1,
        update: bool = False,
    ) -> None:
        """Adds rows (ids default to ``element_count + i``).

        ``ids``: integers in ``[0, 2**63 - 1]`` (see the module docstring). ``labels``: one int per row, a list of int
        lists (e.g. section ids), or None. An existing id raises
        ``ValueError`` unless ``update=True`` (then the vector - and the labels, when given - are replaced and the
        element re-linked). Multithreaded, GIL released.
        """
        rows = _as_rows(vectors, self._dim)
        ids_arr = _as_ids(ids, rows.shape[0])
        off, vals = _labels_csr(labels, rows.shape[0])
        self._c().add(rows, ids_arr, off, vals, self._threads(num_threads), bool(update), False)

    def search(
        self,
        queries: Any,
        k: int,
        ef: Union[None, int, Sequence[int], np.ndarray] = None,
        labels: Union[None, int, Iterable[int]] = None,
        num_threads: int = -1,
    ) -> tuple[np.ndarray, np.ndarray]:
        """k nearest neighbours: ``(ids int64 [n, k], scores float32 [n, k])``, best first.

        Scores are similarities (ip/cosine: inner product; l2: negative squared L2). Rows with fewer than k results
        are padded with id -1 and score -inf; ``k`` may be at most ``max(element_count, 1024)`` (ValueError beyond).
        ``ef``: one int or one per query (raised to k). ``labels``: keep only elements carrying any of these labels
        (exact search over the allowed subset when that is cheaper).
        """
        rows = _as_rows(queries, self._dim, "queries")
        k = _check_k(k)
        return self._c().search(rows, k, _as_ef(ef, rows.shape[0]), _query_labels(labels), None, self._threads(num_threads))

    def search_mmr(
        self,
        query: Any,
        k: int,
        fetch_k: int = 50,
        lambda_: float = 0.5,
        ef: Optional[int] = None,
        labels: Union[None, int, Iterable[int]] = None,
        *,
        return_relevance: bool = False,
    ) -> Union[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Search ``fetch_k`` candidates and diversify them to ``k`` with MMR, in one native call.

        MMR = lambda * sim(q, d) - (1 - lambda) * max_j sim(d, d_j), with the index's own similarity (ip/cosine:
        inner product, l2: negative squared L2; int8 pairs from the stored codes, never dequantized to Python).
        Returns ``(ids int64 [<=k], mmr_scores float32)`` in pick order, plus the similarity to the query
        (``relevance``) when ``return_relevance``. ``fetch_k`` is raised to ``k`` and ``ef`` to ``fetch_k``; ``k`` and
        ``fetch_k`` may be at most ``max(element_count, 1024)`` (ValueError beyond).
        Use ``medretrieve.lambda_for(query_type)`` for a per-query lambda.
        """
        q = _as_rows(query, self._dim, "query")
        if q.shape[0] != 1:
            raise IndexInputError(f"search_mmr takes one query, got {q.shape[0]} rows")
        k = _check_k(k)
        fetch = _check_count(fetch_k, "fetch_k")
        lam = float(lambda_)
        if not 0.0 <= lam <= 1.0:
            raise IndexInputError(f"lambda_ must be in [0, 1], got {lambda_!r}")
        ef_value = None if ef is None else _check_count(ef, "ef")
        ids, scores, relevance = _core.search_mmr(self._c(), q[0], k, fetch, lam, ef_value, _query_labels(labels))
        return (ids, scores, relevance) if return_relevance else (ids, scores)

    def labels_of(self, id: int) -> list[int]:
        """The labels element ``id`` carries."""
        return list(self._c().labels_of(_as_id(id)))

    def memory_bytes(self) -> int:
        """Native bytes held (slabs, links, ids, labels; excludes a memory-mapped file's pages)."""
        return int(self._c().memory_bytes())

    def stats(self) -> IndexStats:
        s = self._c().stats()
        return IndexStats(
            space=s["space"], dtype=s["dtype"], dim=s["dim"], M=s["M"], ef_construction=s["ef_construction"],
            ef=s["ef"], count=s["count"], deleted=s["deleted"], max_elements=s["max_elements"],
            max_level=s["max_level"], keep_float=s["keep_float"], prune_alpha=s["prune_alpha"], read_only=s["read_only"],
            memory_bytes=s["memory_bytes"], bytes_per_slab=s["bytes_per_slab"], link_bits=s["link_bits"],
            simd_level=s["simd_level"],
        )

    def save(self, path: Union[str, os.PathLike], snapshot: bool = True) -> None:
        """Atomic save in medretrieve's versioned format (temp file, fsync, rename).

        ``snapshot=True`` copies the index into memory under its lock and writes the copy after, so concurrent
        searches wait only for the copy, at the price of the index's size again in memory for the moment.
        ``snapshot=False`` writes the file straight from the index while holding the lock (searches and adds wait
        for the whole write): no second copy, what a large build uses. Same file either way.
        """
        self._c().save(os.fspath(path), bool(snapshot))

    @classmethod
    def load(cls, path: Union[str, os.PathLike], mmap: bool = False) -> "Index":
        """Loads a saved index; ``mmap=True`` serves it read-only from a memory map (mutations raise)."""
        core = _core.HnswIndex.load(os.fspath(path), bool(mmap))
        s = core.stats()
        obj = cls(s["space"], s["dim"])
        obj._core = core
        return obj

    # --- hnswlib API ----------------------------------------------------
    def add_items(self, data: Any, ids: Any = None, num_threads: int = -1, replace_deleted: bool = False) -> None:
        """hnswlib ``add_items``: existing ids are updated; ``replace_deleted`` reuses deleted slots."""
        rows = _as_rows(data, self._dim)
        ids_arr = _as_ids(ids, rows.shape[0])
        self._c().add(rows, ids_arr, None, None, self._threads(num_threads), True, bool(replace_deleted))

    def knn_query(
        self,
        data: Any,
        k: int = 1,
        num_threads: int = -1,
        filter: Optional[Callable[[int], bool]] = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """hnswlib ``knn_query``: ``(labels uint64 [n, k], distances float32 [n, k])``, closest first.

        Distances: ``1 - ip`` (ip), ``1 - cos`` (cosine), squared L2 (l2). ``filter(label) -> bool`` keeps elements
        (called with the GIL, from any search thread). Raises RuntimeError when fewer than k elements are found, and
        ValueError for ``k > max(element_count, 1024)``.
        """
        rows = _as_rows(data, self._dim, "queries")
        k = _check_k(k)
        if filter is not None and not callable(filter):
            raise TypeError("filter must be callable: filter(label) -> bool")
        ids, scores = self._c().search(rows, k, None, None, filter, self._threads(num_threads))
        if (ids < 0).any():
            raise RuntimeError("Cannot return the results in a contiguous 2D array. Probably ef or M is too small")
        dist = -scores if self._space == "l2" else 1.0 - scores
        return ids.astype(np.uint64), dist.astype(np.float32, copy=False)

    def get_items(self, ids: Any = None, return_type: str = "numpy") -> Union[np.ndarray, list]:
        """Vectors of live elements (int8: dequantized, or the kept float32 originals); None = all live ones."""
        if return_type not in ("numpy", "list"):
            raise IndexInputError("return_type must be 'numpy' or 'list'")
        core = self._c()
        if ids is None:
            all_ids = core.ids()
            ids_arr = np.array([i for i in all_ids if not core.is_deleted(int(i))], dtype=np.uint64)
        else:
            arr = np.asarray(ids)
            ids_arr = _id_array(arr.reshape(-1), arr.size)
        out = core.get_items(ids_arr)
        return out if return_type == "numpy" else out.tolist()

    def get_ids_list(self) -> list[int]:
        """External ids of every stored element (deleted ones included, as hnswlib)."""
        if self._core is None:
            return []
        return [int(i) for i in self._core.ids()]

    def mark_deleted(self, label: int) -> None:
        """Hides an element from results (it stays navigable; reusable with replace_deleted)."""
        self._c().mark_deleted(_as_id(label))

    def unmark_deleted(self, label: int) -> None:
        self._c().unmark_deleted(_as_id(label))

    def resize_index(self, new_size: int) -> None:
        """hnswlib ``resize_index``: capacity to ``new_size`` elements (not below the count). Past a power of two
        every slab is rewritten with wider level-0 link ids (``IndexStats.link_bits``), a pass over the index."""
        self._c().resize(int(new_size))

    def save_index(self, path: Union[str, os.PathLike]) -> None:
        self.save(path)

    def load_index(self, path: Union[str, os.PathLike], max_elements: int = 0) -> None:
        """hnswlib ``load_index``: replaces this index's contents; grows capacity to ``max_elements`` if larger."""
        core = _core.HnswIndex.load(os.fspath(path), False)
        s = core.stats()
        if s["space"] != self._space or s["dim"] != self._dim:
            raise IndexInputError(
                f"index file holds space={s['space']} dim={s['dim']}, this Index is space={self._space} dim={self._dim}"
            )
        if max_elements and max_elements > core.capacity:
            core.resize(int(max_elements))
        self._core = core

    # --- pickling -------------------------------------------------------
    def __getstate__(self) -> dict:
        return {
            "space": self._space,
            "dim": self._dim,
            "num_threads": self._num_threads,
            "data": None if self._core is None else self._core.to_bytes(),
        }

    def __setstate__(self, state: dict) -> None:
        self._space = state["space"]
        self._dim = state["dim"]
        self._num_threads = state["num_threads"]
        self._core = None if state["data"] is None else _core.HnswIndex.from_bytes(state["data"])

    def __repr__(self) -> str:
        if self._core is None:
            return f"Index(space={self._space!r}, dim={self._dim}, uninitialised)"
        s = self._core.stats()
        return (
            f"Index(space={self._space!r}, dim={self._dim}, dtype={s['dtype']!r}, count={s['count']}, "
            f"deleted={s['deleted']}, max_elements={s['max_elements']}, M={s['M']}, ef={s['ef']}"
            f"{', read-only mmap' if s['read_only'] else ''})"
        )


# ---------------------------------------------------------------------------
# exact search


class FlatIndex:
    """Exact k-NN over float32 or int8 vectors (same quantizer as ``Index``), with labels and deletions.

    Used for small corpora, for filtered fallbacks and as ground truth.

    ``device="cuda"`` keeps a copy of the live rows on the GPU (int8 codes + scales, or float32 rows; built on the
    first search and rebuilt after adds and deletions) and searches it with the CUDA kernels: int8 dot products in
    exact int32 on tensor cores, so ids match the CPU path and scores agree to float rounding. Searches with
    ``labels`` or ``filter`` run on the CPU. The CPU copy stays the source of truth (save, get_items, labels).
    """

    def __init__(self, space: str, dim: int, dtype: str = "float32", device: str = "cpu") -> None:
        self._space = _check_space(space)
        self._dim = _check_dim(dim)
        self._dtype = _check_dtype(dtype)
        self._core = _core.FlatIndexCore(self._space, self._dtype, self._dim)
        self._set_device(device)

    def _set_device(self, device: str) -> None:
        if device not in ("cpu", "cuda"):
            raise IndexInputError(f"device must be 'cpu' or 'cuda', got {device!r}")
        if device == "cuda":
            ok, why = _core._cuda_available()
            if not ok:
                raise RuntimeError(f"FlatIndex(device='cuda'): CUDA is not available here: {why}")
        self._device = device
        # device copy: (table, ids of its rows, the mutation count it was packed at)
        self._table: Any = None
        self._mutations = 0  # bumped after every add / delete / undelete: a copy packed earlier is stale
        self._table_lock = threading.Lock()

    @property
    def space(self) -> str:
        return self._space

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def dtype(self) -> str:
        return self._dtype

    @property
    def device(self) -> str:
        return self._device

    def __len__(self) -> int:
        """Live (not deleted) elements."""
        return len(self._core)

    def train(self, sample: Any) -> None:
        """int8: sets the quantization centre from ``sample`` rows (call before the first add)."""
        self._core.train(_as_rows(sample, self._dim, "training vectors"))

    def add(self, vectors: Any, ids: Any = None, labels: LabelsArg = None, num_threads: int = -1) -> None:
        """Adds rows (ids default to ``count + i``; existing ids raise ValueError; ids follow the module's id rule).
        Labels as in ``Index.add``."""
        rows = _as_rows(vectors, self._dim)
        ids_arr = _as_ids(ids, rows.shape[0])
        off, vals = _labels_csr(labels, rows.shape[0])
        self._core.add(rows, ids_arr, off, vals, _check_threads(num_threads))
        self._mutations += 1

    def search(
        self,
        queries: Any,
        k: int,
        ef: Any = None,
        labels: Union[None, int, Iterable[int]] = None,
        num_threads: int = -1,
        filter: Optional[Callable[[int], bool]] = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k: ``(ids int64 [n, k], scores float32 [n, k])``, same conventions as ``Index.search`` (padding
        with id -1, ``k`` at most ``max(count, 1024)``).

        ``ef`` is accepted for signature compatibility and ignored (the search is exhaustive).
        """
        rows = _as_rows(queries, self._dim, "queries")
        k = _check_k(k)
        if filter is not None and not callable(filter):
            raise TypeError("filter must be callable: filter(id) -> bool")
        if self._device == "cuda" and labels is None and filter is None and k > 0 and len(rows):
            return self._search_device(rows, k)
        return self._core.search(rows, k, _query_labels(labels), filter, _check_threads(num_threads))

    def _device_table(self) -> tuple[Any, np.ndarray]:
        with self._table_lock:
            if self._table is None or self._table[2] != self._mutations:
                version = self._mutations  # read before packing: a concurrent change makes the copy stale
                ids, data, scales = self._core._pack_live()
                table = _core._CudaTable()
                table.assign(data, scales)
                self._table = (table, ids, version)
            return self._table[0], self._table[1]

    def _search_device(self, rows: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        table, ids = self._device_table()
        if k > 1024:
            raise IndexInputError(f"k must be <= 1024 on device='cuda', got {k}")
        q, q_scales, offsets = self._core._pack_queries(rows)
        pos, scores = table.search(q, q_scales, k, "l2" if self._space == "l2" else "ip")
        found = pos >= 0
        out_ids = np.full(pos.shape, -1, dtype=np.int64)
        out_ids[found] = ids[pos[found]]
        scores = np.where(found, scores + offsets[:, None], -np.inf).astype(np.float32)
        return out_ids, scores

    def mark_deleted(self, id: int) -> None:
        self._core.mark_deleted(_as_id(id))
        self._mutations += 1

    def unmark_deleted(self, id: int) -> None:
        self._core.unmark_deleted(_as_id(id))
        self._mutations += 1

    def get_items(self, ids: Any) -> np.ndarray:
        arr = np.asarray(ids)
        return self._core.get_items(_id_array(arr.reshape(-1), arr.size))

    def get_ids_list(self) -> list[int]:
        return [int(i) for i in self._core.ids()]

    def memory_bytes(self) -> int:
        return int(self._core.memory_bytes())

    def save(self, path: Union[str, os.PathLike]) -> None:
        self._core.save(os.fspath(path))

    @classmethod
    def load(cls, path: Union[str, os.PathLike], mmap: bool = False, device: str = "cpu") -> "FlatIndex":
        core = _core.FlatIndexCore.load(os.fspath(path), bool(mmap))
        obj = cls._wrap(core)
        obj._set_device(device)
        return obj

    @classmethod
    def _wrap(cls, core: Any) -> "FlatIndex":
        obj = cls.__new__(cls)
        obj._wrap_into(core)
        return obj

    def __getstate__(self) -> dict:
        return {"data": self._core.to_bytes()}

    def __setstate__(self, state: dict) -> None:
        self._wrap_into(_core.FlatIndexCore.from_bytes(state["data"]))

    def _wrap_into(self, core: Any) -> None:
        # The native object (from the file header) is the source of truth for space / dtype / dim.
        self._core = core
        self._set_device("cpu")
        self._space, self._dtype, self._dim = core.space, core.dtype, core.dim

    def __repr__(self) -> str:
        return (f"FlatIndex(space={self._space!r}, dim={self._dim}, dtype={self._dtype!r}, size={len(self)}"
                + (", device='cuda')" if self._device == "cuda" else ")"))
