"""The compiled filters the filtered views hold: bounded in bytes, the least recently used let go first, one larger
than the budget never kept, and dropped with the view that owns it."""
from __future__ import annotations

import gc

import numpy as np

import medretrieve
from medretrieve.retrieval.compiled_filters import CompiledFilters


class _View:
    """An owner (a filtered view's stand-in): anything that can be weakly referenced."""


def _compiled(index: medretrieve.Index, seed: int) -> object:
    return index.compile_filter(np.random.default_rng(seed).random(8000) < 0.2)  # 1,600 rows: linked


def test_the_least_recently_used_go_past_the_budget_and_a_dropped_view_takes_its_own():
    rng = np.random.default_rng(0)
    index = medretrieve.Index("ip", 8)
    index.init_index(8000, M=8, ef_construction=40)
    index.add(rng.normal(size=(8000, 8)).astype(np.float32))
    a, b, c = _compiled(index, 1), _compiled(index, 2), _compiled(index, 3)
    assert a.linked and b.linked and c.linked
    size = max(f.memory_bytes for f in (a, b, c))
    held = CompiledFilters(budget_bytes=2 * size + size // 2)  # room for two
    va, vb, vc = _View(), _View(), _View()
    assert held.keep(va, a) and held.keep(vb, b)
    assert held.get(va) is a  # a is now the most recently used: b goes for c
    assert held.keep(vc, c)
    assert held.get(vb) is None and held.get(va) is a and held.get(vc) is c
    assert held.held_bytes() == a.memory_bytes + c.memory_bytes
    del va
    gc.collect()
    assert held.held_bytes() == c.memory_bytes
    assert held.get(_View()) is None
    small = CompiledFilters(budget_bytes=size // 2)
    assert not small.keep(vb, b) and small.get(vb) is None and small.held_bytes() == 0
