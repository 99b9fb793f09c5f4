"""Typed stub of ``medretrieve._core``, the pybind11 module built from ``csrc/bindings``.

Every name the module exports, so mypy checks the Python wrappers (``index.py``, ``fusion.py``) against the
native signatures. Array arguments typed ``ArrayLike`` are converted by pybind11 (``forcecast``) to the dtype named
in the comment; arguments typed ``NDArray`` must already have that dtype and be C-contiguous. ``_CudaTable`` exists
only in builds with the CUDA back end (``_cuda_available()`` tells).
"""
from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt

_I64 = npt.NDArray[np.int64]
_U64 = npt.NDArray[np.uint64]
_F32 = npt.NDArray[np.float32]
_I8 = npt.NDArray[np.int8]
_Ranked = tuple[_I64, _F32]
_IdList = Union[npt.NDArray[np.integer[Any]], Sequence[int]]

# --- kernels (bind_kernels.cpp) ---------------------------------------------

def simd_level() -> str: ...
def cpu_simd_level() -> str: ...
def available_simd_levels() -> list[str]: ...
def _kernel_dot_f32(a: npt.ArrayLike, b: npt.ArrayLike, level: str, /) -> float: ...  # float32
def _kernel_l2sq_f32(a: npt.ArrayLike, b: npt.ArrayLike, level: str, /) -> float: ...  # float32
def _kernel_dot_i8(a: npt.ArrayLike, b: npt.ArrayLike, level: str, /) -> int: ...  # int8
def _quantize_i8(x: npt.ArrayLike, centre: Optional[npt.ArrayLike] = None) -> tuple[_I8, float]: ...

# --- fusion (bind_fusion.cpp) -------------------------------------------------

def _mmr(
    candidates: Union[_F32, _I8],
    k: int,
    lambda_: Any,  # a real number in [0, 1], checked here
    query: Optional[_F32] = None,
    relevance: Optional[_F32] = None,
    metric: str = "ip",
    scales: Optional[_F32] = None,
) -> _Ranked: ...
def _mmr_batch(
    candidates: list[Union[_F32, _I8]],
    k: int,
    lambdas: Any,  # one real number in [0, 1] for all, or one per problem
    queries: Optional[Sequence[Optional[_F32]]] = None,
    relevances: Optional[Sequence[Optional[_F32]]] = None,
    metric: str = "ip",
    scales: Optional[Sequence[Optional[_F32]]] = None,
    threads: int = 0,
) -> list[_Ranked]: ...
def _rrf(
    lists: Sequence[_IdList],
    k: float = 60.0,
    weights: Optional[npt.ArrayLike] = None,
    top_n: int = 0,
) -> _Ranked: ...
def _fuse_scores(
    id_lists: Sequence[_IdList],
    score_lists: Sequence[npt.ArrayLike],
    method: str = "minmax",
    weights: Optional[npt.ArrayLike] = None,
    top_n: int = 0,
) -> _Ranked: ...

# --- CUDA back end (bind_cuda.cpp) -------------------------------------------

CUDA_ROW_FILTER: bool  # the device's exact search takes a row bitset (allowed=)

def _cuda_available() -> tuple[bool, str]: ...
def _cuda_device_summary() -> str: ...
def _cuda_exact_search(
    queries: Union[_F32, _I8],
    database: Union[_F32, _I8],
    k: int,
    metric: str = "ip",
    query_scales: Optional[_F32] = None,
    database_scales: Optional[_F32] = None,
    warmup: int = 0,
    repeats: int = 0,
) -> tuple[_I64, _F32, list[float]]: ...
def _cuda_mmr_batch(
    candidates: list[Union[_F32, _I8]],
    k: int,
    lambdas: Any,
    queries: Optional[Sequence[Optional[_F32]]] = None,
    relevances: Optional[Sequence[Optional[_F32]]] = None,
    metric: str = "ip",
    scales: Optional[Sequence[Optional[_F32]]] = None,
    warmup: int = 0,
    repeats: int = 0,
) -> tuple[list[_Ranked], list[float]]: ...
def _cuda_rrf(
    lists: Sequence[_IdList],
    k: float = 60.0,
    weights: Optional[npt.ArrayLike] = None,
    top_n: int = 0,
    warmup: int = 0,
    repeats: int = 0,
) -> tuple[_I64, _F32, list[float]]: ...

class _CudaTable:
    """Rows kept on the GPU for ``FlatIndex(device="cuda")``; ``search`` returns row positions."""

    def __init__(self) -> None: ...
    def assign(self, rows: Union[_F32, _I8], scales: Optional[_F32] = None) -> None: ...
    def search(self, queries: Union[_F32, _I8], query_scales: Optional[_F32], k: int, metric: str) -> tuple[_I64, _F32]: ...
    @property
    def rows(self) -> int: ...
    @property
    def device_bytes(self) -> int: ...

# --- indexes (bind_index.cpp, bind_search_mmr.cpp) ---------------------------

SEARCH_ALLOWED_BITSET: bool  # Index / FlatIndex search take allowed= (a bitset over ids)

class CompiledFilter:
    """A row filter compiled by one HNSW index for the searches that reuse it (``HnswIndex.compile_filter``)."""

    @property
    def count(self) -> int: ...  # allowed elements when compiled
    @property
    def linked(self) -> bool: ...  # whether the allowed elements' two-hop links were built
    @property
    def memory_bytes(self) -> int: ...
    @property
    def bits(self) -> _U64: ...  # the bitset over external ids it was compiled from (a copy)

class HnswIndex:
    """Native int8/float32 HNSW index (use ``medretrieve.Index``)."""

    def __init__(
        self,
        space: str,
        dtype: str,
        dim: int,
        max_elements: int,
        M: int,
        ef_construction: int,
        seed: int,
        keep_float: bool,
        allow_replace_deleted: bool,
        prune_alpha: Optional[float] = None,
    ) -> None: ...
    # Arguments typed Any are read and checked by the binding (bindings/args.h): array-likes, ints, label lists.
    def add(
        self,
        data: Any,  # rows (n, dim) or one row (dim,)
        ids: Any = None,  # one id per row
        labels: Any = None,  # one int or list of ints per row
        num_threads: Any = None,
        update: bool = False,
        replace_deleted: bool = False,
    ) -> None: ...
    def search(
        self,
        queries: Any,  # rows (nq, dim) or one row (dim,)
        k: Any,
        ef: Any = None,  # one int or one per query
        labels: Any = None,  # an int or an iterable of ints
        filter: Optional[Callable[[int], bool]] = None,
        num_threads: Any = None,
        allowed: Union[None, _U64, CompiledFilter] = None,  # a packed bitset over external ids, or compiled here
    ) -> tuple[_I64, _F32]: ...
    def compile_filter(self, allowed: _U64, num_threads: Any = None) -> CompiledFilter: ...
    @property
    def epoch(self) -> int: ...  # changes with every add and deletion
    def train(self, sample: Any, /) -> None: ...
    def mark_deleted(self, id: Any, /) -> None: ...
    def unmark_deleted(self, id: Any, /) -> None: ...
    def resize(self, new_size: Any, /) -> None: ...
    def set_allow_replace_deleted(self, allow: bool) -> None: ...
    def set_ef(self, ef: Any, /) -> None: ...
    @property
    def ef(self) -> int: ...
    def set_entry_beam(self, beam: Any, /) -> None: ...
    @property
    def entry_beam(self) -> int: ...
    def set_filter_exact_factor(self, factor: float, /) -> None: ...
    def set_scan_sketches(self, on: bool, /) -> None: ...
    @property
    def count(self) -> int: ...
    @property
    def deleted_count(self) -> int: ...
    @property
    def capacity(self) -> int: ...
    @property
    def read_only(self) -> bool: ...
    def ids(self) -> _U64: ...
    def live_ids(self) -> _U64: ...
    def get_items(self, ids: Any, /) -> _F32: ...  # ids of any shape, flattened; not one scalar
    def labels_of(self, id: Any, /) -> list[int]: ...
    def contains(self, id: int, /) -> bool: ...
    def is_deleted(self, id: int, /) -> bool: ...
    def memory_bytes(self) -> int: ...
    def stats(self) -> dict[str, Any]: ...
    def save(self, path: str, snapshot: bool = True) -> None: ...
    def to_bytes(self) -> bytes: ...
    @staticmethod
    def load(path: str, mmap: bool = False) -> HnswIndex: ...
    @staticmethod
    def from_bytes(data: bytes, /) -> HnswIndex: ...

class FlatIndexCore:
    """Native exact index (use ``medretrieve.FlatIndex``)."""

    def __init__(self, space: str, dtype: str, dim: int) -> None: ...
    def add(
        self,
        data: Any,
        ids: Any = None,
        labels: Any = None,
        num_threads: Any = None,
        update: bool = False,
        reuse_deleted: bool = False,
        max_live: Optional[int] = None,
    ) -> None: ...
    def search(
        self,
        queries: Any,
        k: Any,
        labels: Any = None,
        filter: Optional[Callable[[int], bool]] = None,
        num_threads: Any = None,
    ) -> tuple[_I64, _F32]: ...
    def train(self, sample: Any, /) -> None: ...
    def mark_deleted(self, id: Any, /) -> None: ...
    def unmark_deleted(self, id: Any, /) -> None: ...
    def __len__(self) -> int: ...
    @property
    def space(self) -> str: ...
    @property
    def dtype(self) -> str: ...
    @property
    def dim(self) -> int: ...
    @property
    def count(self) -> int: ...
    @property
    def read_only(self) -> bool: ...
    @property
    def declared_max(self) -> int: ...
    def set_declared_max(self, n: int) -> None: ...
    def contains(self, id: Any, /) -> bool: ...
    def is_deleted(self, id: Any, /) -> bool: ...
    def ids(self) -> _U64: ...
    def get_items(self, ids: Any, /) -> _F32: ...
    def _pack_live(self) -> tuple[_I64, Union[_F32, _I8], Optional[_F32]]: ...
    def _pack_queries(self, queries: Any, /) -> tuple[Union[_F32, _I8], Optional[_F32], _F32]: ...
    def memory_bytes(self) -> int: ...
    def save(self, path: str, /) -> None: ...
    def to_bytes(self) -> bytes: ...
    @staticmethod
    def load(path: str, mmap: bool = False) -> FlatIndexCore: ...
    @staticmethod
    def from_bytes(data: bytes, /) -> FlatIndexCore: ...

def search_mmr(
    index: HnswIndex,
    query: Any,  # one row (dim,) or (1, dim)
    k: Any,
    fetch_k: Any,
    lambda_: Any,
    ef: Any = None,
    labels: Any = None,
    allowed: Optional[_U64] = None,  # a packed bitset over external ids, as HnswIndex.search
) -> tuple[_I64, _F32, _F32]: ...

class IndexInputError(ValueError, RuntimeError):
    """Bad input to an index call (raised by the binding's argument checks)."""
