"""Index.search_mmr: one native call equals search + get_items + mmr done by hand."""
from __future__ import annotations

import numpy as np
import pytest

import medretrieve
from medretrieve import Index

DIM = 48


def _clustered(n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((20, DIM)).astype(np.float32)
    x = centres[rng.integers(0, 20, n)] + 0.3 * rng.standard_normal((n, DIM)).astype(np.float32)
    return x.astype(np.float32)


@pytest.fixture(scope="module")
def data() -> np.ndarray:
    return _clustered(1500, 0)


def _build(data: np.ndarray, space: str, dtype: str) -> Index:
    index = Index(space, DIM)
    index.init_index(len(data) + 10, M=12, ef_construction=80, dtype=dtype)
    index.add(data, labels=np.arange(len(data)) % 5)
    return index


@pytest.mark.parametrize("dtype", ["float32", "int8"])
@pytest.mark.parametrize("space", ["ip", "l2", "cosine"])
@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0])
def test_matches_search_then_mmr(data: np.ndarray, space: str, dtype: str, lam: float) -> None:
    index = _build(data, space, dtype)
    query = data[7] + 0.05
    ids, scores, rel = index.search_mmr(query, k=8, fetch_k=40, lambda_=lam, ef=40, return_relevance=True)

    cand, cand_scores = index.search(query, 40, ef=40)
    vectors = index.get_items(cand[0])
    q = query / np.linalg.norm(query) if space == "cosine" else query
    metric = "l2" if space == "l2" else "ip"
    order, ref_scores = medretrieve.mmr(q, vectors, 8, lambda_=lam, relevance=cand_scores[0], metric=metric)
    assert list(ids) == list(cand[0][order])
    np.testing.assert_allclose(rel, cand_scores[0][order], rtol=1e-5, atol=1e-5)
    # int8 pair similarities come from the codes (exact identity), get_items dequantizes: same up to rounding.
    np.testing.assert_allclose(scores, ref_scores, rtol=1e-4, atol=1e-4)
    assert ids.dtype == np.int64 and scores.dtype == np.float32


def test_lambda_one_is_plain_search_order(data: np.ndarray) -> None:
    index = _build(data, "ip", "int8")
    ids, _ = index.search_mmr(data[3], k=10, fetch_k=10, lambda_=1.0, ef=64)
    plain, _ = index.search(data[3], 10, ef=64)
    assert list(ids) == list(plain[0])


def test_low_lambda_diversifies(data: np.ndarray) -> None:
    index = _build(data, "cosine", "float32")
    q = data[11]
    plain, _ = index.search(q, 10, ef=100)
    div, _ = index.search_mmr(q, k=10, fetch_k=100, lambda_=0.3, ef=100)

    def redundancy(ids: np.ndarray) -> float:
        v = index.get_items(ids)
        v = v / np.linalg.norm(v, axis=1, keepdims=True)
        sims = v @ v.T
        return float(sims[np.triu_indices(len(ids), 1)].mean())

    assert redundancy(div) < redundancy(plain[0])


def test_labels_restrict_candidates(data: np.ndarray) -> None:
    index = _build(data, "ip", "int8")
    ids, _ = index.search_mmr(data[0], k=5, fetch_k=30, lambda_=0.5, labels=[2])
    assert len(ids) == 5
    assert all(int(i) % 5 == 2 for i in ids)


def test_fewer_candidates_than_k_and_empty_index() -> None:
    index = Index("l2", 4)
    index.init_index(10)
    ids, scores = index.search_mmr(np.ones(4, np.float32), k=3, fetch_k=5)
    assert len(ids) == 0 and len(scores) == 0
    index.add(np.eye(4, dtype=np.float32))
    ids, _ = index.search_mmr(np.ones(4, np.float32), k=10, fetch_k=20)
    assert sorted(ids.tolist()) == [0, 1, 2, 3]


def test_bad_input(data: np.ndarray) -> None:
    index = _build(data[:200], "ip", "float32")
    with pytest.raises(ValueError, match="lambda_"):
        index.search_mmr(data[0], k=3, lambda_=1.5)
    with pytest.raises(ValueError, match="fetch_k"):
        index.search_mmr(data[0], k=3, fetch_k=0)
    with pytest.raises(ValueError, match="k must be"):
        index.search_mmr(data[0], k=-1)
    with pytest.raises(ValueError):
        index.search_mmr(np.zeros(DIM + 1, np.float32), k=3)
    with pytest.raises(ValueError, match="one query"):
        index.search_mmr(data[:2], k=3)
    bad = data[0].copy()
    bad[3] = np.nan
    with pytest.raises(ValueError):
        index.search_mmr(bad, k=3)
