"""The compiled row filters the filtered views hold (``Index.compile_filter``), bounded in bytes over the process.

A filtered view (``filtered.FilteredDense``) hands its compiled filter to :data:`COMPILED` once built and asks for
it on each search; past the budget the least recently used go, and their views answer with the plain bitset (the
same rows, at the plain walk's speed). A view that is dropped (the retriever's cache let its filter go, or its
collection changed) drops its compiled filter with it.
"""
from __future__ import annotations

import threading
import weakref
from collections import OrderedDict
from typing import Any, Optional, Tuple

from ..index import CompiledFilter

#: bytes of compiled filters kept at once (their links cost about 4 bytes per index row plus 4 per link: a 10%
#: filter of 112,511 rows 2 MB, of 1M rows at M 16 about 30 MB)
COMPILED_BYTES = 256 << 20


class CompiledFilters:
    """Compiled filters by the view that owns them, most recently used last, ``budget_bytes`` at most in all."""

    def __init__(self, budget_bytes: int = COMPILED_BYTES) -> None:
        self.budget_bytes = budget_bytes
        self._held: "OrderedDict[int, Tuple[weakref.ref[Any], CompiledFilter]]" = OrderedDict()
        self._lock = threading.RLock()  # a view's weakref callback may run while this thread holds it

    def get(self, owner: Any) -> Optional[CompiledFilter]:
        """``owner``'s compiled filter (now the most recently used), or None (not built, or let go)."""
        with self._lock:
            got = self._held.get(id(owner))
            if got is None or got[0]() is not owner:
                return None
            self._held.move_to_end(id(owner))
            return got[1]

    def keep(self, owner: Any, compiled: CompiledFilter) -> bool:
        """Holds ``compiled`` for ``owner`` while it lives, letting the least recently used others go past the
        budget; False (nothing kept) when it alone is larger than the budget."""
        if compiled.memory_bytes > self.budget_bytes:
            return False
        key = id(owner)
        with self._lock:
            self._held[key] = (weakref.ref(owner, lambda _ref: self._drop(key, _ref)), compiled)
            self._held.move_to_end(key)
            total = sum(c.memory_bytes for _, c in self._held.values())
            while total > self.budget_bytes:
                _, (_, gone) = self._held.popitem(last=False)
                total -= gone.memory_bytes
        return True

    def held_bytes(self) -> int:
        with self._lock:
            return sum(c.memory_bytes for _, c in self._held.values())

    def _drop(self, key: int, ref: "weakref.ref[Any]") -> None:
        with self._lock:
            got = self._held.get(key)
            if got is not None and got[0] is ref:
                del self._held[key]


#: the process's compiled filters
COMPILED = CompiledFilters()
