"""search(..., allowed=): row filters as a bool mask or a packed uint64 bitset over external ids, on Index and
FlatIndex, checked against a float64 NumPy reference of the exact filtered search: awkward sizes (nothing, one row,
fewer than k, everything allowed), deleted rows, ids that are not slots, filters correlated with the query, both
planner paths, and the errors a wrong filter gets."""
from __future__ import annotations

import numpy as np
import pytest

import medretrieve
from medretrieve.index import allowed_bitset, allowed_count, pack_allowed
from medretrieve.index.allowed import NATIVE_BITSET
from index_data import embedding_like

DIM = 16
N = 2000
K = 10


def filtered_truth(x: np.ndarray, q: np.ndarray, k: int, space: str, keep: np.ndarray) -> list[np.ndarray]:
    """The exact top-k row positions among those ``keep`` (bool, per row) allows, float64, per query."""
    x64, q64 = x.astype(np.float64), q.astype(np.float64)
    if space == "cosine":
        x64 = x64 / np.linalg.norm(x64, axis=1, keepdims=True)
        q64 = q64 / np.linalg.norm(q64, axis=1, keepdims=True)
    sim = -((q64[:, None, :] - x64[None, :, :]) ** 2).sum(-1) if space == "l2" else q64 @ x64.T
    sim[:, ~keep] = -np.inf
    order = np.argsort(-sim, axis=1, kind="stable")
    return [row[np.isfinite(sim[i, row])][:k] for i, row in enumerate(order)]


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return embedding_like(N, DIM, seed=3), embedding_like(25, DIM, seed=4)


def build(kind: str, space: str, x: np.ndarray, ids: np.ndarray) -> object:
    if kind == "hnsw":
        index = medretrieve.Index(space, DIM)
        index.init_index(len(x), M=12, ef_construction=100)
        index.add(x, ids)
        index.set_ef(100)
        return index
    flat = medretrieve.FlatIndex(space, DIM)
    flat.add(x, ids)
    return flat


def masks(x: np.ndarray, q: np.ndarray) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(9)
    far = np.argsort(((x - q[0]) ** 2).sum(1))[-N // 10:]  # correlated: the tenth of rows farthest from query 0
    out = {
        "nothing": np.zeros(N, bool),
        "one": np.isin(np.arange(N), [1234]),
        "fewer_than_k": np.isin(np.arange(N), [3, 500, 1999]),
        "everything": np.ones(N, bool),
        "half": rng.random(N) < 0.5,
        "tenth": rng.random(N) < 0.1,
        "one_percent": rng.random(N) < 0.01,
        "far_from_query": np.isin(np.arange(N), far),
    }
    return out


@pytest.mark.parametrize("kind", ["hnsw", "flat"])
@pytest.mark.parametrize("space", ["l2", "ip", "cosine"])
def test_filtered_search_matches_the_exact_filtered_reference(data: tuple, kind: str, space: str) -> None:
    x, q = data
    ext = np.arange(N, dtype=np.int64) * 7 + 100  # external ids that are not the slots
    index = build(kind, space, x, ext)
    hits = want = 0
    for name, keep in masks(x, q).items():
        truth = filtered_truth(x, q, K, space, keep)
        size = int(ext.max()) + 1
        for allowed in (allowed_bitset(ext[keep], size), _mask_over_ids(ext, keep, size)):
            ids, scores = index.search(q, K, allowed=allowed)
            for row, t, sc in zip(ids, truth, scores):
                assert (row[len(t):] == -1).all() and np.isneginf(sc[len(t):]).all(), name
                assert (row[: len(t)] >= 0).all(), f"{name}: fewer than min(k, allowed) hits"
                assert np.isin(row[: len(t)], ext[keep]).all(), f"{name}: a row outside the filter"
                hits += len(set(row[: len(t)]) & set(ext[t]))
                want += len(t)
                if kind == "flat":
                    np.testing.assert_array_equal(row[: len(t)], ext[t])
    assert hits >= 0.95 * want


def _mask_over_ids(ext: np.ndarray, keep: np.ndarray, size: int) -> np.ndarray:
    mask = np.zeros(size, bool)
    mask[ext[keep]] = True
    return mask


@pytest.mark.parametrize("kind", ["hnsw", "flat"])
def test_deleted_rows_never_come_back_and_labels_combine(data: tuple, kind: str) -> None:
    x, q = data
    index = build(kind, "l2", x, np.arange(N))
    labels_index = medretrieve.Index("l2", DIM) if kind == "hnsw" else medretrieve.FlatIndex("l2", DIM)
    if kind == "hnsw":
        labels_index.init_index(N)
    labels_index.add(x, labels=[[i % 2] for i in range(N)])
    keep = np.zeros(N, bool)
    keep[:40] = True
    for i in range(0, 40, 4):
        index.mark_deleted(i)
        labels_index.mark_deleted(i)
    live = keep & (np.arange(N) % 4 != 0)
    truth = filtered_truth(x, q, K, "l2", live)
    ids, _ = index.search(q, K, allowed=keep)
    for row, t in zip(ids, truth):
        assert set(row) == set(t)
    ids, _ = labels_index.search(q, K, labels=[1], allowed=keep)
    truth = filtered_truth(x, q, K, "l2", live & (np.arange(N) % 2 == 1))
    for row, t in zip(ids, truth):
        assert set(row[: len(t)]) == set(t) and (row[len(t):] == -1).all()


@pytest.mark.skipif(not NATIVE_BITSET, reason="the planner's paths need a core with native bitsets (rebuild _core)")
def test_both_planner_paths_keep_recall_on_a_correlated_filter(data: tuple) -> None:
    x, q = data
    index = build("hnsw", "l2", x, np.arange(N))
    far = np.zeros(N, bool)
    far[np.argsort(((x - q.mean(0)) ** 2).sum(1))[-N // 5:]] = True  # a fifth of the rows, far from the queries
    truth = filtered_truth(x, q, K, "l2", far)
    for factor in (0.0, 1e9):  # 0: always walk the graph; 1e9: always scan the allowed rows exactly
        index._c().set_filter_exact_factor(factor)
        ids, _ = index.search(q, K, allowed=far)
        found = sum(len(set(row) & set(t)) for row, t in zip(ids, truth))
        assert found >= 0.95 * K * len(q), factor


def test_bitset_helpers() -> None:
    bits = allowed_bitset([0, 63, 64, 200, 64], size=300)
    assert bits.dtype == np.uint64 and len(bits) == 5 and allowed_count(bits) == 4
    mask = np.zeros(201, bool)
    mask[[0, 63, 64, 200]] = True
    np.testing.assert_array_equal(pack_allowed(mask), bits[:4])
    assert pack_allowed(bits) is not None and allowed_count(allowed_bitset([], 0)) == 0
    assert allowed_count(pack_allowed(np.ones(70, bool))) == 70


@pytest.mark.parametrize("bad, error", [
    (np.zeros((2, 3), bool), ValueError),
    (np.array([1, 2], np.int32), TypeError),
    (np.array([0.5]), TypeError),
    ("everything", TypeError),
])
def test_a_wrong_filter_is_refused_by_name(bad: object, error: type) -> None:
    index = medretrieve.FlatIndex("l2", 4)
    index.add(np.eye(4, dtype=np.float32))
    with pytest.raises(error, match="allowed"):
        index.search(np.ones(4, np.float32), 2, allowed=bad)


def test_allowed_bitset_refuses_negative_and_non_integer_ids() -> None:
    with pytest.raises(ValueError, match="allowed ids"):
        allowed_bitset([-1])
    with pytest.raises(TypeError, match="allowed ids"):
        allowed_bitset([0.5])


@pytest.mark.skipif(not NATIVE_BITSET, reason="the planner's paths need a core with native bitsets (rebuild _core)")
@pytest.mark.parametrize("space", ["ip", "cosine"])
def test_sketch_scans_keep_recall_and_can_be_turned_off(space: str, tmp_path) -> None:
    n, dim = 20_000, 64
    x, q = embedding_like(n, dim, seed=5), embedding_like(20, dim, seed=6)
    index = medretrieve.Index(space, dim)
    index.init_index(n, M=12, ef_construction=64, dtype="int8")
    index.add(x)
    assert index.stats().scan_sketches
    far = np.zeros(n, bool)
    far[np.argsort(x @ q.mean(0))[: n // 2]] = True  # half the rows, the farthest from the queries
    truth = filtered_truth(x, q, K, space, far)
    index._c().set_filter_exact_factor(1e9)  # every filtered search scans: 10,000 rows, the sketch scan's
    found = {}
    for on in (True, False):
        index.set_scan_sketches(on)
        assert index.stats().scan_sketches is on
        found[on], _ = index.search(q, K, ef=10, allowed=far)
        assert np.isin(found[on], np.flatnonzero(far)).all()
        assert sum(len(set(row) & set(t)) for row, t in zip(found[on], truth)) >= 0.95 * K * len(q), on
    index.set_scan_sketches(True)
    with_sketches = index.memory_bytes()
    index.set_scan_sketches(False)
    assert with_sketches - index.memory_bytes() == n * (dim // 8 + 8)  # the signs and a scale a row
    # Not saved: a loaded index keeps them again, and scans as the one saved did.
    index.set_scan_sketches(True)
    index.save(tmp_path / "i.mr")
    for mmap in (False, True):
        loaded = medretrieve.Index.load(tmp_path / "i.mr", mmap=mmap)
        assert loaded.stats().scan_sketches
        loaded._c().set_filter_exact_factor(1e9)
        np.testing.assert_array_equal(loaded.search(q, K, ef=10, allowed=far)[0], found[True])
    with pytest.raises(TypeError, match="enabled must be a bool"):
        index.set_scan_sketches("yes")  # type: ignore[arg-type]
