"""Row filters (``allowed=``) on ``Index.search_mmr`` and ``BFIndex.knn_query``, checked against float64 NumPy
references: the exact filtered candidates, MMR over them, and the exact filtered k-NN. Awkward sizes (nothing
allowed, one row, fewer than k, everything), ids past the mask's end, deleted rows, labels with the filter, ids that
are not slots, and the errors a wrong filter gets."""
from __future__ import annotations

import numpy as np
import pytest

import medretrieve
from medretrieve.index import allowed_bitset
from index_data import embedding_like

DIM = 16
N = 1500
K = 6
FETCH_K = 30


def similarity(a: np.ndarray, b: np.ndarray, space: str) -> np.ndarray:
    """float64 similarities of rows of ``a`` to rows of ``b`` in the index's convention (l2: -squared distance)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    if space == "cosine":
        a64 = a64 / np.linalg.norm(a64, axis=1, keepdims=True)
        b64 = b64 / np.linalg.norm(b64, axis=1, keepdims=True)
    if space == "l2":
        return -((a64[:, None, :] - b64[None, :, :]) ** 2).sum(-1)
    return a64 @ b64.T


def filtered_top(x: np.ndarray, q: np.ndarray, k: int, space: str, keep: np.ndarray) -> np.ndarray:
    """Positions of the exact top-k rows of ``x`` among those ``keep`` allows, best first (one query)."""
    sim = similarity(q[None], x, space)[0]
    allowed = np.flatnonzero(keep)
    return allowed[np.argsort(-sim[allowed], kind="stable")][:k]


def mmr_reference(x: np.ndarray, q: np.ndarray, cand: np.ndarray, k: int, lam: float, space: str) -> list[int]:
    """Greedy MMR in float64 over the candidate rows (positions into ``x``): the picks, in order."""
    rel = similarity(q[None], x[cand], space)[0]
    pair = similarity(x[cand], x[cand], space)
    picked: list[int] = []
    for _ in range(min(k, len(cand))):
        redundancy = pair[:, picked].max(axis=1) if picked else np.zeros(len(cand))
        value = lam * rel - (1 - lam) * redundancy
        value[picked] = -np.inf
        picked.append(int(np.argmax(value)))
    return [int(cand[i]) for i in picked]


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    return embedding_like(N, DIM, seed=11), embedding_like(4, DIM, seed=12)


def build_index(x: np.ndarray, space: str, ids: np.ndarray, dtype: str = "float32", labels: object = None) -> object:
    index = medretrieve.Index(space, DIM)
    index.init_index(len(x), M=12, ef_construction=100, dtype=dtype)
    index.add(x, ids, labels=labels)
    return index


def filters(x: np.ndarray, q: np.ndarray) -> dict[str, np.ndarray]:
    """Row masks (per position) of every awkward size, and filters correlated with the query."""
    rng = np.random.default_rng(5)
    far = np.argsort(((x - q[0]) ** 2).sum(1))[-N // 10:]
    return {
        "nothing": np.zeros(N, bool),
        "one": np.isin(np.arange(N), [777]),
        "fewer_than_k": np.isin(np.arange(N), [2, 900, 1499]),
        "fewer_than_fetch_k": np.isin(np.arange(N), rng.choice(N, 12, replace=False)),
        "everything": np.ones(N, bool),
        "half": rng.random(N) < 0.5,
        "tenth": rng.random(N) < 0.1,
        "far_from_query": np.isin(np.arange(N), far),
    }


@pytest.mark.parametrize("space", ["l2", "ip", "cosine"])
@pytest.mark.parametrize("lam", [0.0, 0.5, 1.0])
def test_search_mmr_is_mmr_over_the_exact_filtered_candidates(data: tuple, space: str, lam: float) -> None:
    x, q = data
    ext = np.arange(N, dtype=np.int64) * 3 + 50  # external ids that are not the slots
    index = build_index(x, space, ext)
    index._c().set_filter_exact_factor(1e9)  # every filtered search scans its allowed rows: exact candidates
    for name, keep in filters(x, q).items():
        for allowed in (allowed_bitset(ext[keep], int(ext.max()) + 1), _mask_over_ids(ext, keep)):
            for query in q:
                cand = filtered_top(x, query, FETCH_K, space, keep)
                ids, scores, rel = index.search_mmr(query, K, FETCH_K, lam, return_relevance=True, allowed=allowed)
                if name == "everything":  # no planner scan unfiltered: the graph's candidates, checked for size only
                    assert len(ids) == K and len(set(ids)) == K
                    continue
                want = ext[mmr_reference(x, query, cand, K, lam, space)]
                np.testing.assert_array_equal(ids, want, err_msg=f"{name}, lambda {lam}")
                np.testing.assert_allclose(rel, similarity(query[None], x[(ids - 50) // 3], space)[0], rtol=1e-4,
                                           atol=1e-4)
                assert ids.dtype == np.int64 and scores.dtype == np.float32 and len(scores) == len(ids)


def _mask_over_ids(ext: np.ndarray, keep: np.ndarray) -> np.ndarray:
    mask = np.zeros(int(ext.max()) + 1, bool)
    mask[ext[keep]] = True
    return mask


@pytest.mark.parametrize("dtype", ["float32", "int8"])
def test_search_mmr_with_the_planner_returns_min_k_allowed_and_nothing_outside(data: tuple, dtype: str) -> None:
    x, q = data
    index = build_index(x, "ip", np.arange(N), dtype=dtype)
    for name, keep in filters(x, q).items():
        for query in q:
            ids, _ = index.search_mmr(query, K, FETCH_K, 0.5, allowed=keep)
            assert len(ids) == min(K, int(keep.sum())), name
            assert len(set(ids)) == len(ids) and keep[ids].all(), f"{name}: a row outside the filter"
            # The same candidates as the filtered search (same planner, same ef), then MMR over them.
            plain, _ = index.search(query, FETCH_K, ef=FETCH_K, allowed=keep)
            assert set(ids) <= set(plain[0][plain[0] >= 0]), name


def test_search_mmr_ids_past_the_mask_deleted_rows_and_labels(data: tuple) -> None:
    x, q = data
    index = build_index(x, "l2", np.arange(N), labels=[[i % 3] for i in range(N)])
    short = np.zeros(100, bool)  # ids 100.. are past the mask's end: out
    short[::2] = True
    ids, _ = index.search_mmr(q[0], K, FETCH_K, 0.7, allowed=short)
    assert len(ids) == K and (ids < 100).all() and (ids % 2 == 0).all()

    for i in range(0, 20, 2):  # delete ten of the fifty allowed rows
        index.mark_deleted(i)
    live = np.zeros(N, bool)
    live[:100:2] = True
    live[:20] = False
    ids, _ = index.search_mmr(q[0], 60, 60, 0.7, allowed=short)
    assert sorted(ids) == list(np.flatnonzero(live)), "every live allowed row, no deleted one"

    both = live & (np.arange(N) % 3 == 1)
    ids, _ = index.search_mmr(q[1], K, FETCH_K, 1.0, labels=[1], allowed=short)
    np.testing.assert_array_equal(ids, filtered_top(x, q[1], K, "l2", both))  # lambda 1: the filtered top k


@pytest.mark.parametrize("bad, error", [
    (np.zeros((2, 3), bool), ValueError),
    (np.array([1, 2], np.int32), TypeError),
    ("everything", TypeError),
])
def test_search_mmr_refuses_a_wrong_filter_by_name(bad: object, error: type) -> None:
    index = build_index(np.eye(DIM, dtype=np.float32), "l2", np.arange(DIM))
    with pytest.raises(error, match="allowed"):
        index.search_mmr(np.ones(DIM, np.float32), 2, allowed=bad)


@pytest.mark.parametrize("call, error, match", [
    (dict(query=np.ones((2, DIM), np.float32)), ValueError, "one query"),
    (dict(lambda_=1.5), ValueError, "lambda"),
    (dict(k=10**6), ValueError, "k="),
])
def test_search_mmr_with_a_filter_refuses_bad_arguments_by_name(call: dict, error: type, match: str) -> None:
    index = build_index(np.eye(DIM, dtype=np.float32), "l2", np.arange(DIM))
    args = dict(query=np.ones(DIM, np.float32), k=2, lambda_=0.5) | call
    with pytest.raises(error, match=match):
        index.search_mmr(allowed=np.ones(DIM, bool), **args)


# --- BFIndex -------------------------------------------------------------------------------------------------------


def hnswlib_distance(sim: np.ndarray, space: str) -> np.ndarray:
    return -sim if space == "l2" else 1 - sim


@pytest.mark.parametrize("space", ["l2", "ip", "cosine"])
def test_bfindex_allowed_is_the_exact_filtered_knn(data: tuple, space: str) -> None:
    x, q = data
    exact = medretrieve.BFIndex(space, DIM)
    exact.init_index(N)
    exact.add_items(x)
    for name, keep in filters(x, q).items():
        k = min(K, int(keep.sum()))
        if k == 0:
            with pytest.raises(RuntimeError, match="Fewer than k"):
                exact.knn_query(q, k=1, allowed=keep)
            continue
        labels, distances = exact.knn_query(q, k=k, allowed=allowed_bitset(np.flatnonzero(keep), N))
        for query, row, dist in zip(q, labels, distances):
            want = filtered_top(x, query, k, space, keep)
            np.testing.assert_array_equal(row, want, err_msg=name)
            ref = hnswlib_distance(similarity(query[None], x[want], space)[0], space)
            np.testing.assert_allclose(dist, ref, rtol=1e-4, atol=1e-4)
        mask_labels, _ = exact.knn_query(q, k=k, allowed=keep)
        np.testing.assert_array_equal(mask_labels, labels)


def test_bfindex_allowed_with_filter_deletions_and_short_masks(data: tuple) -> None:
    x, q = data
    exact = medretrieve.BFIndex("l2", DIM)
    exact.init_index(N)
    exact.add_items(x)
    keep = np.zeros(N, bool)
    keep[:300] = True
    for label in range(0, 300, 5):
        exact.delete_vector(label)
    live = keep & (np.arange(N) % 5 != 0)
    both = live & (np.arange(N) % 2 == 0)
    labels, _ = exact.knn_query(q, k=K, filter=lambda label: label % 2 == 0, allowed=keep)
    for query, row in zip(q, labels):
        np.testing.assert_array_equal(row, filtered_top(x, query, K, "l2", both))
    labels, _ = exact.knn_query(q, k=K, allowed=keep[:300])  # labels past the mask's end are out
    for query, row in zip(q, labels):
        np.testing.assert_array_equal(row, filtered_top(x, query, K, "l2", live))
    with pytest.raises(RuntimeError, match="Fewer than k"):
        exact.knn_query(q, k=3, allowed=np.isin(np.arange(N), [0, 1, 5, 10]))  # 0, 5, 10 are deleted: one passes
    with pytest.raises(TypeError, match="allowed"):
        exact.knn_query(q, k=3, allowed=np.arange(10))
