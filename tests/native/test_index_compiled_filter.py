"""Index.compile_filter: a row filter compiled once for the searches that reuse it (its rows over the slots and,
under 35% of the rows, the allowed rows' two-hop links). Checked against the exact filtered search: the same
recall as the plain bitset, never a row that fails the filter, correct after the index changes (adds, deletions),
with custom ids, labels and MMR, and refused by another index or a FlatIndex."""
from __future__ import annotations

import numpy as np
import pytest

import medretrieve
from medretrieve.index import CompiledFilter, pack_allowed
from index_data import embedding_like

DIM = 16
N = 12000
K = 10


def truth(x: np.ndarray, q: np.ndarray, keep: np.ndarray, ids: np.ndarray) -> list[set[int]]:
    """The exact top-K ids among the rows ``keep`` allows, by inner product in float64."""
    sim = q.astype(np.float64) @ x.astype(np.float64).T
    sim[:, ~keep] = -np.inf
    return [set(ids[np.argsort(-row, kind="stable")[:K]].tolist()) for row in sim]


def recall(found: np.ndarray, want: list[set[int]]) -> float:
    return float(np.mean([len(set(f.tolist()) & w) / K for f, w in zip(found, want)]))


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return embedding_like(N, DIM, seed=21), embedding_like(40, DIM, seed=22)


def build(x: np.ndarray, ids: np.ndarray, labels: object = None, capacity: int = 0) -> medretrieve.Index:
    index = medretrieve.Index("ip", DIM)
    index.init_index(max(capacity, len(x)), M=12, ef_construction=100, dtype="int8")
    index.add(x, ids, labels=labels)
    index.set_num_threads(1)
    return index


@pytest.mark.parametrize("custom_ids", [False, True])
def test_a_compiled_filter_searches_as_its_bitset_does(data: tuple, custom_ids: bool) -> None:
    x, q = data
    ids = np.arange(N, dtype=np.int64) * 7 + 5 if custom_ids else np.arange(N, dtype=np.int64)
    index = build(x, ids)
    keep = np.random.default_rng(1).random(N) < 0.1
    mask = np.zeros(int(ids.max()) + 1, bool)
    mask[ids[keep]] = True
    compiled = index.compile_filter(mask)
    assert isinstance(compiled, CompiledFilter)
    assert compiled.linked and compiled.count == int(keep.sum()) and compiled.memory_bytes > 0
    assert np.array_equal(compiled.bits, pack_allowed(mask))
    want = truth(x, q, keep, ids)
    plain, _ = index.search(q, K, ef=48, allowed=mask)
    got, scores = index.search(q, K, ef=48, allowed=compiled)
    assert set(got.ravel().tolist()) <= set(ids[keep].tolist())
    assert np.all(np.diff(scores, axis=1) <= 0)
    assert recall(got, want) >= 0.95
    assert recall(got, want) >= recall(plain, want) - 0.03


def test_after_adds_and_deletions_it_still_keeps_to_its_filter(data: tuple) -> None:
    x, q = data
    index = build(x, np.arange(N), capacity=N + 40)
    mask = np.random.default_rng(2).random(N + 40) < 0.1
    mask[N:] = True  # ids added after compiling pass
    compiled = index.compile_filter(mask)
    epoch = index.epoch
    first, _ = index.search(q[:1], K, ef=48, allowed=compiled)
    index.mark_deleted(int(first[0, 0]))
    assert index.epoch != epoch
    again, _ = index.search(q[:1], K, ef=48, allowed=compiled)
    assert int(first[0, 0]) not in again[0].tolist()
    index.add(q[:1] * 4, [N + 7])  # the query scaled up (the best inner product), an allowed id
    top, _ = index.search(q[:1], K, ef=48, allowed=compiled)
    assert top[0, 0] == N + 7
    keep = mask[:N].copy()
    keep[int(first[0, 0])] = False
    got, _ = index.search(q, K, ef=48, allowed=index.compile_filter(mask))  # compiled again: linked again
    allowed_ids = set(np.flatnonzero(keep).tolist()) | {N + 7}
    assert set(got.ravel().tolist()) <= allowed_ids


def test_labels_and_mmr_combine_with_a_compiled_filter(data: tuple) -> None:
    x, q = data
    index = build(x, np.arange(N), labels=[i % 3 for i in range(N)])
    mask = np.random.default_rng(3).random(N) < 0.2
    compiled = index.compile_filter(mask)
    got, _ = index.search(q, K, ef=64, labels=[1], allowed=compiled)
    assert all(mask[i] and i % 3 == 1 for i in got.ravel().tolist())
    picked, _ = index.search_mmr(q[0], 5, fetch_k=30, allowed=compiled)
    assert len(picked) == 5 and all(mask[i] for i in picked.tolist())


def test_wide_and_narrow_filters_compile_without_links(data: tuple) -> None:
    x, q = data
    index = build(x, np.arange(N))
    rng = np.random.default_rng(4)
    for share in (0.5, 0.005):  # over 35% of the rows, and under 1024 of them: no links to build
        mask = rng.random(N) < share
        compiled = index.compile_filter(mask)
        assert not compiled.linked and compiled.count == int(mask.sum())
        got, _ = index.search(q, K, ef=48, allowed=compiled)
        assert recall(got, truth(x, q, mask, np.arange(N))) >= 0.95


def test_another_index_and_flat_refuse_it(data: tuple) -> None:
    x, q = data
    index, other = build(x, np.arange(N)), build(x[:500], np.arange(500))
    compiled = index.compile_filter(np.ones(N, bool))
    with pytest.raises(ValueError, match="another index"):
        other.search(q, K, allowed=compiled)
    flat = medretrieve.FlatIndex("ip", DIM)
    flat.add(x[:100])
    with pytest.raises(TypeError, match="CompiledFilter"):
        flat.search(q, K, allowed=compiled)
    with pytest.raises(TypeError):
        index.compile_filter(None)
