"""``Index``: the HNSW index over float32 or int8 vectors, hnswlib-compatible plus a native API."""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Optional, Sequence, Union

import numpy as np

from .. import _core
from ._hnswlib import knn_results
from ._inputs import IndexInputError, LabelsArg, check_dim, check_dtype, check_space
from .allowed import AllowedArg, CompiledFilter, native_search_args, pack_allowed
from .hnswlib_file import NotHnswlibFile, hnswlib_file_dim, lacks_medretrieve_magic, read_hnswlib_file

@dataclass(frozen=True)
class IndexStats:
    """A snapshot of an index's state (``Index.stats()``); ``memory_bytes`` counts native bytes held.

    ``bytes_per_slab``: bytes of one element's slab (level-0 links, label signature, int8 scale and norm term,
    code); ``link_bits``: the width of each level-0 link id in it, the bits ``max_elements`` needs (at least 16;
    32 in files of format versions 1-2), widened when the index grows past a power of two; ``scan_sketches``:
    whether the rows' sign sketches are kept (``Index.set_scan_sketches``).
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
    scan_sketches: bool = False


class Index:
    """HNSW index over float32 or int8 vectors; hnswlib-compatible plus a native API.

    hnswlib API: ``init_index``, ``add_items``, ``knn_query`` (hnswlib distances), ``set_ef``, ``save_index``,
    ``load_index``, ``mark_deleted``... Native API: ``add`` (labels, ``update``), ``search`` (similarities, per-query
    ``ef``, label filter, padded results), ``train``, ``save``, ``Index.load(path, mmap=True)``, ``stats``.
    """

    def __init__(self, space: str, dim: int) -> None:
        self._space = check_space(space)
        self._dim = check_dim(dim)
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
        self._core = _core.HnswIndex(
            self._space, check_dtype(dtype), self._dim, max_elements, M, ef_construction, random_seed,
            bool(keep_float), bool(allow_replace_deleted), prune_alpha,
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
        if isinstance(num_threads, bool) or not isinstance(num_threads, (int, np.integer)):
            raise TypeError(f"num_threads must be an integer, got {type(num_threads).__name__}")
        self._num_threads = max(-1, min(int(num_threads), 2**31 - 1))

    def set_ef(self, ef: int) -> None:
        """Default efSearch (candidate list size); values below k are raised to k per query (0 is accepted, as
        in hnswlib)."""
        self._c().set_ef(ef)

    def set_entry_beam(self, beam: int) -> None:
        """Width of the beam search on layer 1 whose best ``beam`` elements seed the layer-0 search. 0 (the
        default) uses ``max(1, ef // 8)`` per query; 1 is one greedy descent, as hnswlib.
        A single descent sometimes ends in the wrong cluster, and only a much larger ef recovers; a beam of
        ef // 8 grows with the layer-0 search, so it costs a near-constant share of a query (under a tenth of
        its time) at any ef (``bench/ann.py``, ``bench/scale.py --entry-beam``, RESULTS.md). Not saved with
        the index."""
        self._c().set_entry_beam(beam)

    def set_scan_sketches(self, enabled: bool) -> None:
        """Whether a filtered search's scan of many allowed rows reads the rows' sign sketches first (int8
        indexes in ``ip`` / ``cosine`` space; on by default there, ignored elsewhere). They cost ``dim / 8 + 8``
        bytes a row (15% of the int8 codes at 384-d; in ``memory_bytes``) and make such scans 4-8x faster
        (``docs/index.md``, "Filtered search"); off frees them and every scan is exact. Turning them on derives
        them from the stored codes (55 ms for 200k rows at 768-d). Not saved: a loaded index has them on, derived as
        it opens."""
        if not isinstance(enabled, (bool, np.bool_)):
            raise TypeError(f"enabled must be a bool, got {type(enabled).__name__}")
        self._c().set_scan_sketches(bool(enabled))

    def _threads(self, num_threads: Any) -> Any:
        """The call's thread count, or this index's default when the call leaves it at -1 / None."""
        return self._num_threads if num_threads is None or (type(num_threads) is int and num_threads < 0) \
            else num_threads

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
        self._c().train(sample)

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
        self._c().add(vectors, ids, labels, self._threads(num_threads), bool(update), False)

    def search(
        self,
        queries: Any,
        k: int,
        ef: Union[None, int, Sequence[int], np.ndarray] = None,
        labels: Union[None, int, Iterable[int]] = None,
        num_threads: int = -1,
        *,
        allowed: AllowedArg = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """k nearest neighbours: ``(ids int64 [n, k], scores float32 [n, k])``, best first.

        Scores are similarities (ip/cosine: inner product; l2: negative squared L2). Rows with fewer than k results
        are padded with id -1 and score -inf; ``k`` may be at most ``max(element_count, 1024)`` (ValueError beyond).
        ``ef``: one int or one per query (raised to k). ``labels``: keep only elements carrying any of these labels.
        ``allowed``: keep only these external ids: a bool mask (``allowed[id]``; ids past its end are out) or a
        packed ``uint64`` bitset (``medretrieve.index.allowed_bitset``, ``pack_allowed``; read in place, so build it
        once per filter). Labels and ``allowed`` may be combined (both must pass). A restricted search walks the
        graph keeping ``ef`` allowed elements (as hnswlib's filtered search does), or scores the allowed ones exactly
        when fewer of them than the walk would visit pass (the planner, ``docs/index.md``): it returns ``min(k,
        allowed live rows)`` hits and never a row that fails the filter. The bitset is compiled to the index's slots
        once per call, not per query: read as it is when the ids are the slots (0..n-1 added in order), else a pass
        over the stored ids (or a hash look-up per allowed id when few are set). ``allowed`` may also be a
        :class:`CompiledFilter` of this index (``compile_filter``): compiled once for every search that reuses it.
        """
        filter, extra = native_search_args(allowed, None, compiled=True)
        return self._c().search(queries, k, ef, labels, filter, self._threads(num_threads), **extra)

    def compile_filter(self, allowed: AllowedArg, num_threads: int = -1) -> CompiledFilter:
        """``allowed`` (a bool mask or packed ``uint64`` bitset over external ids, as ``search`` takes it) compiled
        once for the searches that reuse it: pass the result as ``search(..., allowed=...)``.

        It holds the filter's rows over the index's slots and, when fewer than 35% of the live rows pass (1024 at
        least), each allowed row's links to the allowed rows around it (ACORN's two-hop expansion, done once): the
        graph walk then reads one link list per row it expands instead of about 17 at 10% allowed (1.5-1.8x the
        QPS at recall 0.95 on 112,511 BioASQ passages and at 1M x 768; ``docs/index.md``, "Compiled filters").
        Compiling costs about one two-hop expansion per allowed row, on ``num_threads`` threads (about 30 ms for
        11,000 of 112,511 rows on one, 470 ms for 100,000 of 1M), and ``memory_bytes`` (about 4 bytes per row plus 4
        per link: 2 MB and 23 MB there).

        It stays correct forever: after an add or a deletion (``epoch`` changes) a search with it compiles its
        bitset again, as for a plain one, and walks without the links; compile it again to get them back. Another
        index refuses it (ValueError).
        """
        return self._c().compile_filter(pack_allowed(allowed), self._threads(num_threads))

    @property
    def epoch(self) -> int:
        """Changes with every add and deletion (a :class:`CompiledFilter` of an older one walks unlinked)."""
        return int(self._c().epoch)

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
        allowed: AllowedArg = None,
    ) -> Union[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Search ``fetch_k`` candidates and diversify them to ``k`` with MMR, in one native call.

        MMR = lambda * sim(q, d) - (1 - lambda) * max_j sim(d, d_j), with the index's own similarity (ip/cosine:
        inner product, l2: negative squared L2; int8 pairs from the stored codes, never dequantized to Python).
        Returns ``(ids int64 [<=k], mmr_scores float32)`` in pick order, plus the similarity to the query
        (``relevance``) when ``return_relevance``. ``fetch_k`` is raised to ``k`` and ``ef`` to ``fetch_k``; ``k`` and
        ``fetch_k`` may be at most ``max(element_count, 1024)`` (ValueError beyond).
        Use ``medretrieve.lambda_for(query_type)`` for a per-query lambda.
        ``allowed``: the row filter of ``search`` (a bool mask or packed ``uint64`` bitset over external ids, with
        ``labels`` if given): the ``fetch_k`` candidates are that filtered search, planner included, so MMR picks
        ``min(k, allowed live rows)`` of them and never a row outside the filter.
        """
        if isinstance(allowed, CompiledFilter):  # MMR's fetch reads the bitset it was compiled from
            allowed = allowed.bits
        extra = {} if allowed is None else {"allowed": pack_allowed(allowed)}
        ids, scores, relevance = _core.search_mmr(self._c(), query, k, fetch_k, lambda_, ef, labels, **extra)
        return (ids, scores, relevance) if return_relevance else (ids, scores)

    def labels_of(self, id: int) -> list[int]:
        """The labels element ``id`` carries."""
        return list(self._c().labels_of(id))

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
            simd_level=s["simd_level"], scan_sketches=s["scan_sketches"],
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
        """Loads a saved index; ``mmap=True`` serves it read-only from a memory map (mutations raise).

        A file saved by hnswlib does not hold its space: open it with ``Index(space, dim).load_index(path)``."""
        if lacks_medretrieve_magic(path):
            _refuse_hnswlib_file(path)
        core = _core.HnswIndex.load(os.fspath(path), bool(mmap))
        s = core.stats()
        obj = cls(s["space"], s["dim"])
        obj._core = core
        return obj

    # --- hnswlib API ----------------------------------------------------
    def add_items(self, data: Any, ids: Any = None, num_threads: int = -1, replace_deleted: bool = False) -> None:
        """hnswlib ``add_items``: existing ids are updated; ``replace_deleted`` reuses deleted slots."""
        self._c().add(data, ids, None, self._threads(num_threads), True, bool(replace_deleted))

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
        ids, scores = self._c().search(data, k, None, None, filter, self._threads(num_threads))
        return knn_results(ids, scores, self._space, "Probably ef or M is too small")

    def get_items(self, ids: Any = None, return_type: str = "numpy") -> Union[np.ndarray, list]:
        """Vectors of live elements (int8: dequantized, or the kept float32 originals); None = all live ones."""
        if return_type not in ("numpy", "list"):
            raise IndexInputError("return_type must be 'numpy' or 'list'")
        core = self._c()
        out = core.get_items(core.live_ids() if ids is None else ids)
        return out if return_type == "numpy" else out.tolist()

    def get_ids_list(self) -> list[int]:
        """External ids of every stored element (deleted ones included, as hnswlib)."""
        if self._core is None:
            return []
        return [int(i) for i in self._core.ids()]

    def mark_deleted(self, label: int) -> None:
        """Hides an element from results (it stays navigable; reusable with replace_deleted)."""
        self._c().mark_deleted(label)

    def unmark_deleted(self, label: int) -> None:
        self._c().unmark_deleted(label)

    def resize_index(self, new_size: int) -> None:
        """hnswlib ``resize_index``: capacity to ``new_size`` elements (not below the count). Past a power of two
        every slab is rewritten with wider level-0 link ids (``IndexStats.link_bits``), a pass over the index."""
        self._c().resize(new_size)

    def save_index(self, path: Union[str, os.PathLike]) -> None:
        self.save(path)

    def load_index(
        self,
        path: Union[str, os.PathLike],
        max_elements: int = 0,
        allow_replace_deleted: bool = False,
        *,
        dtype: str = "float32",
    ) -> None:
        """hnswlib ``load_index``: replaces this index's contents; grows capacity to ``max_elements`` if larger.

        ``allow_replace_deleted`` sets whether ``add_items(..., replace_deleted=True)`` may reuse deleted slots from
        now on, as in hnswlib (which does not save it); ``Index.load`` keeps the setting the file was saved with.

        ``path`` may also be a file saved by hnswlib itself (``hnswlib.Index.save_index``) for this index's space and
        ``dim``: its vectors, labels and deletion marks are read (``hnswlib_file``) and linked into a new graph with
        the file's ``M``, ``ef_construction`` and ``max_elements``, stored as ``dtype`` (float32: as hnswlib holds
        them). That is one build of the index (6.9 s for 100k 384-d vectors on 2 threads); ``Index.save`` then
        writes medretrieve's own format, or ``medretrieve convert-hnswlib`` does both. A file of neither format is an
        IndexInputError.
        """
        if lacks_medretrieve_magic(path):
            self._load_hnswlib_file(path, max_elements, allow_replace_deleted, dtype)
            return
        core = _core.HnswIndex.load(os.fspath(path), False)
        s = core.stats()
        if s["space"] != self._space or s["dim"] != self._dim:
            raise IndexInputError(
                f"index file holds space={s['space']} dim={s['dim']}, this Index is space={self._space} dim={self._dim}"
            )
        if max_elements and max_elements > core.capacity:
            core.resize(int(max_elements))
        core.set_allow_replace_deleted(bool(allow_replace_deleted))
        self._core = core

    def _load_hnswlib_file(
        self, path: Union[str, os.PathLike], max_elements: int, allow_replace_deleted: bool, dtype: str
    ) -> None:
        try:
            saved = read_hnswlib_file(path, self._dim)
        except NotHnswlibFile as exc:
            raise IndexInputError(f"{exc}; nor a medretrieve index file (bad magic)") from None
        self._core = None  # a failed rebuild leaves the index uninitialised, not half-filled
        rebuilt = Index(self._space, self._dim)
        rebuilt.init_index(max(saved.max_elements, int(max_elements), 1), M=saved.M,
                           ef_construction=saved.ef_construction, allow_replace_deleted=allow_replace_deleted,
                           dtype=dtype)
        if len(saved.labels):
            rebuilt.add_items(saved.vectors, saved.labels.astype(np.int64), num_threads=self._num_threads)
        for label in saved.labels[saved.deleted]:
            rebuilt.mark_deleted(int(label))
        self._core = rebuilt._core

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



def _refuse_hnswlib_file(path: Union[str, os.PathLike]) -> None:
    """``Index.load`` of a file without medretrieve's magic: an hnswlib file gets the way to open it (its space is
    not in the file); anything else goes on to the native loader and its own message."""
    try:
        dim = hnswlib_file_dim(path)
    except NotHnswlibFile:
        return
    raise IndexInputError(
        f"{os.fspath(path)} was saved by hnswlib, whose files do not hold their space: open it with "
        f"medretrieve.Index(space, {dim}).load_index(path), or convert it once with "
        f"`medretrieve convert-hnswlib IN OUT --space SPACE --dim {dim}`"
    )
