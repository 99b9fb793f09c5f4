"""``BFIndex``: hnswlib's exact (brute-force) index API over the native flat index.

The same calls, arguments, results and errors as ``hnswlib.BFIndex``, with two differences a caller can see:

* ``knn_query`` raises RuntimeError when fewer than ``k`` elements pass (hnswlib returns garbage rows then), and
  runs its ``filter`` only for elements close enough to enter the top k (as hnswlib does), so a filter must not count
  on seeing every element. It also takes ``allowed=`` (a bool mask or packed bitset of labels, ``allowed.py``), a
  filter tested natively instead of a Python call per candidate.
* ``add_items`` adds all rows or none: past ``max_elements`` it raises before changing anything (hnswlib adds the
  rows that fit first).

``dtype="int8"`` (a keyword hnswlib does not have) stores int8 codes; the default float32 keeps vectors exact.
"""
from __future__ import annotations

import os
from typing import Any, Callable, Optional, Union

import numpy as np

from .. import _core
from ._hnswlib import knn_results
from ._inputs import IndexInputError, check_dim, check_dtype, check_space, non_negative
from .allowed import AllowedArg, native_search_args


class BFIndex:
    """Exact k-NN with hnswlib's ``BFIndex`` API: ``init_index``, ``add_items`` (an existing id takes the new vector),
    ``delete_vector``, ``knn_query`` (hnswlib distances, ``filter``, ``allowed``), ``save_index`` / ``load_index``,
    ``get_max_elements``, ``get_current_count``, ``set_num_threads`` / ``num_threads``."""

    def __init__(self, space: str, dim: int, *, dtype: str = "float32") -> None:
        self.space = check_space(space)
        self.dim = check_dim(dim)
        self.dtype = check_dtype(dtype)
        self.num_threads = -1  # hnswlib's default: every core
        self._core: Optional[Any] = None
        self._max_elements = 0
        self._next_id = 0  # hnswlib's default ids count the rows added, whatever their ids were

    def _c(self) -> Any:
        if self._core is None:
            raise RuntimeError("BFIndex is not initialised: call init_index() or load_index() first")
        return self._core

    def init_index(self, max_elements: int) -> None:
        """Room for ``max_elements`` live vectors (rows are stored as they come, not allocated up front)."""
        if self._core is not None:
            raise RuntimeError("The index is already initiated.")
        limit = non_negative(max_elements, "max_elements")
        self._core = self._new_core(limit)
        self._max_elements = limit

    def _new_core(self, limit: int) -> Any:
        core = _core.FlatIndexCore(self.space, self.dtype, self.dim)
        core.set_declared_max(limit)
        return core

    def add_items(self, data: Any, ids: Any = None, num_threads: int = -1) -> None:
        """Adds rows; an id already stored takes the new vector. Default ids continue from the rows added so far."""
        core = self._c()
        n = 1 if np.ndim(data) <= 1 else len(data)  # a malformed data argument is refused natively
        if ids is None:
            ids = np.arange(self._next_id, self._next_id + n, dtype=np.uint64)
        core.add(data, ids, None, self._threads(num_threads), update=True, reuse_deleted=True,
                 max_live=self._max_elements)
        self._next_id += n

    def delete_vector(self, label: int) -> None:
        """Removes an element (its id can be added again); an id not stored is ignored, as in hnswlib."""
        core = self._c()
        if core.contains(label) and not core.is_deleted(label):
            core.mark_deleted(label)

    def knn_query(
        self,
        data: Any,
        k: int = 1,
        num_threads: int = -1,
        filter: Optional[Callable[[int], bool]] = None,
        *,
        allowed: AllowedArg = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """``(labels uint64 [n, k], distances float32 [n, k])``, closest first, exact; distances as hnswlib's
        (``1 - ip``, ``1 - cos``, squared L2). ``filter(label) -> bool`` is called with the GIL from the search
        threads, only for elements close enough to enter the top k. ``allowed`` (a keyword hnswlib does not have):
        the labels a result may have, as a bool mask (``allowed[label]``; labels past its end are out) or a packed
        ``uint64`` bitset (``medretrieve.index.allowed_bitset``), tested natively without the GIL: the fast path
        for a filter known as a set of labels (``FlatIndex.search``'s row filter; with ``filter``, both must pass).
        """
        filter, extra = native_search_args(allowed, filter)
        ids, scores = self._c().search(data, k, None, filter, self._threads(num_threads), **extra)
        return knn_results(ids, scores, self.space, f"Fewer than k={k} elements pass")

    def _threads(self, num_threads: Any) -> Any:
        """The call's thread count, or ``num_threads`` when the call leaves it at -1 / None."""
        return self.num_threads if num_threads is None or (type(num_threads) is int and num_threads < 0) \
            else num_threads

    def set_num_threads(self, num_threads: int) -> None:
        self.num_threads = num_threads

    def get_max_elements(self) -> int:
        return self._max_elements

    def get_current_count(self) -> int:
        """Live elements (deleted ones are not counted, as hnswlib removes them)."""
        return len(self._c())

    def save_index(self, path: Union[str, os.PathLike]) -> None:
        """Atomic save in medretrieve's flat-index format (``FlatIndex.load`` reads it too), with max_elements."""
        self._c().save(os.fspath(path))

    def load_index(self, path: Union[str, os.PathLike], max_elements: int = 0) -> None:
        """Replaces this index's contents with a saved one; room for the larger of the saved ``max_elements`` (a
        file saved by ``FlatIndex`` holds its count) and ``max_elements``."""
        core = _core.FlatIndexCore.load(os.fspath(path), False)
        if (core.space, core.dim) != (self.space, self.dim):
            raise IndexInputError(
                f"index file holds space={core.space} dim={core.dim}, this BFIndex is space={self.space} dim={self.dim}"
            )
        limit = max(int(core.declared_max), non_negative(max_elements, "max_elements"))
        core.set_declared_max(limit)
        self.dtype = core.dtype
        self._core, self._max_elements, self._next_id = core, limit, len(core)

    def __repr__(self) -> str:
        return f"<medretrieve.BFIndex(space='{self.space}', dim={self.dim})>"
