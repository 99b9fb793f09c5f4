"""``FlatIndex``: exact k-NN over float32 or int8 vectors, on the CPU or a CUDA device."""
from __future__ import annotations

import os
import threading
from typing import Any, Callable, Iterable, Optional, Union

import numpy as np

from .. import _core
from ._inputs import IndexInputError, LabelsArg, check_dim, check_dtype, check_space
from .allowed import AllowedArg, native_search_args, pack_allowed

# Whether the CUDA back end reads a row bitset on the device (a core built before it did runs allowed= on the CPU).
CUDA_ROW_FILTER = bool(getattr(_core, "CUDA_ROW_FILTER", False))


def _row_bits(id_bits: np.ndarray, row_ids: np.ndarray) -> np.ndarray:
    """A packed bitset over external ids (``allowed``) as one over the device table's rows (``row_ids[row]``)."""
    word = row_ids >> 6
    inside = word < len(id_bits)
    keep = np.zeros(len(row_ids), dtype=bool)
    keep[inside] = ((id_bits[word[inside]] >> (row_ids[inside] & 63).astype(np.uint64)) & np.uint64(1)) != 0
    return pack_allowed(keep)


class FlatIndex:
    """Exact k-NN over float32 or int8 vectors (same quantizer as ``Index``), with labels and deletions.

    Used for small corpora, for filtered fallbacks and as ground truth.

    ``device="cuda"`` keeps a copy of the live rows on the GPU (int8 codes + scales, or float32 rows; built on the
    first search and rebuilt after adds and deletions) and searches it with the CUDA kernels: int8 dot products in
    exact int32 on tensor cores, so ids match the CPU path and scores agree to float rounding; each query's top k is
    selected inside the score tiles (docs/fused.md). ``allowed`` runs on the device too (a bitset over the table's
    rows); searches with ``labels`` or ``filter`` run on the CPU. The CPU copy stays the source of truth (save,
    get_items, labels).
    """

    def __init__(self, space: str, dim: int, dtype: str = "float32", device: str = "cpu") -> None:
        self._space = check_space(space)
        self._dim = check_dim(dim)
        self._dtype = check_dtype(dtype)
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
        self._core.train(sample)

    def add(self, vectors: Any, ids: Any = None, labels: LabelsArg = None, num_threads: int = -1) -> None:
        """Adds rows (ids default to ``count + i``; existing ids raise ValueError; ids follow the module's id rule).
        Labels as in ``Index.add``."""
        self._core.add(vectors, ids, labels, num_threads)
        self._mutations += 1

    def search(
        self,
        queries: Any,
        k: int,
        ef: Any = None,
        labels: Union[None, int, Iterable[int]] = None,
        num_threads: int = -1,
        filter: Optional[Callable[[int], bool]] = None,
        *,
        allowed: AllowedArg = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Exact top-k: ``(ids int64 [n, k], scores float32 [n, k])``, same conventions as ``Index.search`` (padding
        with id -1, ``k`` at most ``max(count, 1024)``, ``allowed`` a bool mask or packed bitset over ids).

        ``ef`` is accepted for signature compatibility and ignored (the search is exhaustive). A sparse ``allowed``
        (at most 1/16 of the rows) scores only its rows; a denser one is tested during the full scan.
        """
        if self._device == "cuda" and labels is None and filter is None:
            if allowed is None:
                return self._search_device(queries, k)
            if CUDA_ROW_FILTER:
                return self._search_device(queries, k, pack_allowed(allowed))
        filter, extra = native_search_args(allowed, filter)
        return self._core.search(queries, k, labels, filter, num_threads, **extra)

    def _device_table(self) -> tuple[Any, np.ndarray]:
        with self._table_lock:
            if self._table is None or self._table[2] != self._mutations:
                version = self._mutations  # read before packing: a concurrent change makes the copy stale
                ids, data, scales = self._core._pack_live()
                table = _core._CudaTable()
                table.assign(data, scales)
                self._table = (table, ids, version)
            return self._table[0], self._table[1]

    def _search_device(
        self, queries: Any, k: Any, id_bits: Optional[np.ndarray] = None
    ) -> tuple[np.ndarray, np.ndarray]:
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or not 1 <= k <= 1024:
            raise IndexInputError(f"k must be an integer in [1, 1024] on device='cuda', got {k!r}")
        q, q_scales, offsets = self._core._pack_queries(queries)  # checks the queries
        if len(q) == 0:
            return np.zeros((0, k), np.int64), np.zeros((0, k), np.float32)
        table, ids = self._device_table()
        metric = "l2" if self._space == "l2" else "ip"
        if id_bits is None:
            pos, scores = table.search(q, q_scales, k, metric)
        else:
            pos, scores = table.search(q, q_scales, k, metric, allowed=_row_bits(id_bits, ids))
        found = pos >= 0
        out_ids = np.full(pos.shape, -1, dtype=np.int64)
        out_ids[found] = ids[pos[found]]
        scores = np.where(found, scores + offsets[:, None], -np.inf).astype(np.float32)
        return out_ids, scores

    def mark_deleted(self, id: int) -> None:
        self._core.mark_deleted(id)
        self._mutations += 1

    def unmark_deleted(self, id: int) -> None:
        self._core.unmark_deleted(id)
        self._mutations += 1

    def get_items(self, ids: Any) -> np.ndarray:
        """Vectors of live elements, one row per id (int8: dequantized); a single id raises ValueError."""
        return self._core.get_items(ids)

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

