"""Row filters for the indexes' ``search(..., allowed=...)``: which external ids a search may return.

A filter is a packed bitset over external ids: a C-contiguous ``uint64`` array in which bit ``id % 64`` of word
``id // 64`` says whether ``id`` may be returned; ids at or past ``64 * len(words)`` may not. ``allowed_bitset``
builds one from ids, ``pack_allowed`` from a NumPy bool mask (``mask[id]``). Build it once per distinct filter and
collection version and pass the same array to every search: the indexes read it in place (no copy for a packed
bitset), the popcount decides between a graph walk and an exact scan of the allowed rows (``docs/index.md``,
"Filtered search"). A filter that many searches of one HNSW ``Index`` reuse can be compiled by it once
(``Index.compile_filter``: a :class:`CompiledFilter`), which ``Index.search`` takes as ``allowed`` too.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .. import _core
from ._inputs import IndexInputError

__all__ = ["AllowedArg", "CompiledFilter", "allowed_bitset", "pack_allowed", "allowed_count"]

#: A row filter an HNSW ``Index`` compiled for the searches that reuse it (``Index.compile_filter``): its ``count``
#: (allowed rows when compiled), ``linked`` (whether the allowed rows' two-hop links were built), ``memory_bytes``
#: and ``bits`` (the bitset it was compiled from).
if TYPE_CHECKING:
    from .._core import CompiledFilter
else:  # a core built before compile_filter: a class nothing is an instance of
    CompiledFilter = getattr(_core, "CompiledFilter", None) or type("CompiledFilter", (), {})

# Whether the native core reads the bitset itself (a core built before it did gets a predicate: same results, slower,
# without the planner's exact scan of few allowed rows).
NATIVE_BITSET = bool(getattr(_core, "SEARCH_ALLOWED_BITSET", False))

# What ``search(allowed=...)`` takes: None (no filter), a bool mask over ids, or a packed uint64 bitset.
AllowedArg = Any


def allowed_bitset(ids: Any, size: int = 0) -> np.ndarray:
    """The packed bitset (``uint64``, ``ceil(max(size, max(ids) + 1) / 64)`` words) with the bits of ``ids`` set.

    ``ids``: integers in ``[0, 2**63 - 1]`` (repeats are fine); ``size``: the number of ids the bitset covers at
    least (a bitset over a whole collection keeps one length whatever it holds). Memory: ``size / 8`` bytes.
    """
    arr = np.asarray(ids)
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise TypeError(f"allowed ids must be integers, got dtype {arr.dtype}")
    arr = arr.astype(np.int64, copy=False).ravel()
    if arr.size and int(arr.min()) < 0:
        raise IndexInputError(f"allowed ids must be >= 0, got {int(arr.min())}")
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0:
        raise IndexInputError(f"size must be an integer >= 0, got {size!r}")
    bits = max(int(size), int(arr.max()) + 1 if arr.size else 0)
    words = np.zeros((bits + 63) // 64, dtype=np.uint64)
    np.bitwise_or.at(words, arr >> 6, np.left_shift(np.uint64(1), (arr & 63).astype(np.uint64)))
    return words


def pack_allowed(allowed: AllowedArg) -> np.ndarray:
    """``allowed`` as a packed uint64 bitset: a bool mask (``mask[id]``, 1-d) is packed (``len(mask) / 8`` bytes);
    a 1-d ``uint64`` array is taken as a bitset already, unchanged (made C-contiguous). Anything else: TypeError."""
    if isinstance(allowed, CompiledFilter):
        raise TypeError("allowed: a CompiledFilter is read only by the HNSW Index that compiled it; pass its bool "
                        "mask or packed bitset here")
    arr = np.asarray(allowed)
    if arr.dtype not in (np.bool_, np.uint64):
        raise TypeError(
            f"allowed must be a bool mask over ids or a packed uint64 bitset (allowed_bitset), got dtype {arr.dtype}"
        )
    if arr.ndim != 1:
        raise IndexInputError(f"allowed must be 1-d (a bool mask over ids or a uint64 bitset), got shape {arr.shape}")
    if arr.dtype == np.bool_:
        packed = np.packbits(arr, bitorder="little")
        padded = np.zeros(-(-len(packed) // 8) * 8, dtype=np.uint8)
        padded[: len(packed)] = packed
        return padded.view("<u8").astype(np.uint64, copy=False)
    return np.ascontiguousarray(arr)


def allowed_count(bitset: np.ndarray) -> int:
    """How many ids a packed bitset allows (its popcount)."""
    return int(np.unpackbits(np.ascontiguousarray(bitset).view(np.uint8)).sum(dtype=np.int64))


def native_search_args(allowed: AllowedArg, filter: Any, compiled: bool = False) -> tuple[Any, dict[str, Any]]:
    """``(filter, extra keyword arguments)`` for a native ``search`` given ``allowed`` and a caller's ``filter``
    callable (either may be None); ``compiled``: the search takes a CompiledFilter too (the HNSW index's)."""
    if allowed is None:
        return filter, {}
    if compiled and isinstance(allowed, CompiledFilter):
        return filter, {"allowed": allowed}
    bits = pack_allowed(allowed)
    if NATIVE_BITSET:
        return filter, {"allowed": bits}
    keep = bitset_predicate(bits)
    return (keep if filter is None else (lambda i: keep(i) and bool(filter(i)))), {}


def bitset_predicate(bitset: np.ndarray) -> Any:
    """``filter(id) -> bool`` reading a packed bitset: the form a native core without bitset support takes."""
    words = [int(w) for w in bitset]
    n = len(words) * 64
    return lambda i: i < n and bool(words[i >> 6] >> (i & 63) & 1)
