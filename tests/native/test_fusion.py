"""medretrieve.fusion against straightforward NumPy / pure-Python references."""
from __future__ import annotations

import math
import os
import subprocess
import sys
from collections import defaultdict
from typing import Dict, List, Optional, Sequence

import numpy as np
import pytest

import medretrieve
from medretrieve import fuse_scores, lambda_for, mmr, mmr_batch, rrf
from medretrieve import fusion

# ---------------------------------------------------------------- references


def ref_similarity(x: np.ndarray, metric: str) -> np.ndarray:
    x = x.astype(np.float64)
    if metric == "ip":
        return x @ x.T
    if metric == "cosine":
        norms = np.linalg.norm(x, axis=1)
        safe = np.where(norms > 0, norms, 1.0)
        y = x / safe[:, None]
        return np.where((norms[:, None] > 0) & (norms[None, :] > 0), y @ y.T, 0.0)
    sq = (x * x).sum(1)
    return -(sq[:, None] + sq[None, :] - 2 * x @ x.T)


def ref_relevance(q: np.ndarray, x: np.ndarray, metric: str) -> np.ndarray:
    q = q.astype(np.float64)
    x = x.astype(np.float64)
    if metric == "ip":
        return x @ q
    if metric == "cosine":
        qn, xn = np.linalg.norm(q), np.linalg.norm(x, axis=1)
        return np.where((xn > 0) & (qn > 0), (x @ q) / np.where(xn > 0, xn, 1) / (qn or 1), 0.0)
    return -((x - q) ** 2).sum(1)


def ref_mmr(rel: np.ndarray, sim: np.ndarray, k: int, lam: float):
    """Similarity matrix + greedy loop; ties: higher relevance, then lower position."""
    n = len(rel)
    remaining = list(range(n))
    max_sim = np.zeros(n)
    order, scores = [], []
    for step in range(min(k, n)):
        vals = {i: lam * rel[i] - (1 - lam) * max_sim[i] for i in remaining}
        best = min(remaining, key=lambda i: (-vals[i], -rel[i], i))
        order.append(best)
        scores.append(vals[best])
        remaining.remove(best)
        for i in remaining:
            max_sim[i] = sim[i, best] if step == 0 else max(max_sim[i], sim[i, best])
    return np.array(order, np.int64), np.array(scores)


def assert_scores_close(got: np.ndarray, want: np.ndarray, scale: float) -> None:
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5 * max(scale, 1.0))


# ---------------------------------------------------------------------- MMR

CASES = [(1, 1, 5), (7, 3, 17), (5, 9, 3), (40, 1, 33), (60, 10, 768), (23, 23, 2)]


@pytest.mark.parametrize("n,k,dim", CASES)
@pytest.mark.parametrize("metric", ["ip", "cosine", "l2"])
@pytest.mark.parametrize("lam", [0.0, 0.3, 1.0])
def test_mmr_float32_matches_reference(n: int, k: int, dim: int, metric: str, lam: float) -> None:
    rng = np.random.default_rng(n * 1000 + k * 10 + dim)
    x = rng.standard_normal((n, dim)).astype(np.float32)
    q = rng.standard_normal(dim).astype(np.float32)
    order, scores = mmr(q, x, k, lam, metric=metric)
    rel = ref_relevance(q, x, metric)
    want_order, want_scores = ref_mmr(rel, ref_similarity(x, metric), k, lam)
    assert order.dtype == np.int64 and scores.dtype == np.float32
    assert len(order) == min(k, n)
    np.testing.assert_array_equal(order, want_order)
    assert_scores_close(scores, want_scores, float(np.abs(rel).max()))


@pytest.mark.parametrize("n,k,dim", CASES)
@pytest.mark.parametrize("metric", ["ip", "cosine", "l2"])
@pytest.mark.parametrize("with_scales", [False, True])
def test_mmr_int8_matches_reference(n: int, k: int, dim: int, metric: str, with_scales: bool) -> None:
    rng = np.random.default_rng(7 + n + k + dim)
    codes = rng.integers(-127, 128, size=(n, dim), dtype=np.int8)
    scales = rng.uniform(0.01, 0.1, n).astype(np.float32) if with_scales else None
    q = rng.standard_normal(dim).astype(np.float32)
    x = codes.astype(np.float64) * (scales[:, None] if with_scales else 1.0)
    order, scores = mmr(q, codes, k, 0.6, metric=metric, scales=scales)
    rel = ref_relevance(q, x, metric)
    want_order, want_scores = ref_mmr(rel, ref_similarity(x, metric), k, 0.6)
    np.testing.assert_array_equal(order, want_order)
    assert_scores_close(scores, want_scores, float(np.abs(ref_similarity(x, metric)).max()))


def test_mmr_int8_query_is_read_as_its_values() -> None:
    rng = np.random.default_rng(3)
    codes = rng.integers(-127, 128, size=(30, 16), dtype=np.int8)
    q8 = rng.integers(-127, 128, size=16, dtype=np.int8)
    a = mmr(q8, codes, 5, 0.5)
    b = mmr(q8.astype(np.float32), codes.astype(np.float32), 5, 0.5)
    np.testing.assert_array_equal(a[0], b[0])
    np.testing.assert_allclose(a[1], b[1], rtol=1e-5)


def test_mmr_relevance_overrides_query_similarity() -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((50, 12)).astype(np.float32)
    rel = rng.standard_normal(50).astype(np.float32)
    order, scores = mmr(None, x, 8, 0.7, relevance=rel)
    want_order, want_scores = ref_mmr(rel.astype(np.float64), ref_similarity(x, "ip"), 8, 0.7)
    np.testing.assert_array_equal(order, want_order)
    assert_scores_close(scores, want_scores, 10.0)
    # With a query too, the relevance still wins.
    order2, _ = mmr(rng.standard_normal(12), x, 8, 0.7, relevance=rel)
    np.testing.assert_array_equal(order2, order)


def test_mmr_lambda_one_is_relevance_order_and_first_pick_is_most_relevant() -> None:
    rng = np.random.default_rng(9)
    x = rng.standard_normal((30, 8)).astype(np.float32)
    rel = rng.standard_normal(30).astype(np.float32)
    order, scores = mmr(None, x, 30, 1.0, relevance=rel)
    np.testing.assert_array_equal(order, np.argsort(-rel, kind="stable"))
    np.testing.assert_allclose(scores, np.sort(rel)[::-1])
    for lam in (0.0, 0.25):
        o, s = mmr(None, x, 1, lam, relevance=rel)
        assert o[0] == int(np.argmax(rel)) and s[0] == pytest.approx(lam * rel.max())


def test_mmr_ties_go_to_higher_relevance_then_lower_position() -> None:
    # Small integer vectors: every similarity is exact in float32.
    x = np.array([[1, 0], [1, 0], [0, 1], [0, 1], [1, 1]], np.float32)
    rel = np.array([1, 1, 1, 1, 1], np.float32)
    order, scores = mmr(None, x, 5, 0.5, relevance=rel)
    want_order, want_scores = ref_mmr(rel.astype(np.float64), ref_similarity(x, "ip"), 5, 0.5)
    np.testing.assert_array_equal(order, want_order)
    np.testing.assert_array_equal(order[:2], [0, 2])  # duplicates of the first pick wait
    np.testing.assert_allclose(scores, want_scores)
    # Equal MMR values but different relevance: the more relevant one wins.
    rel2 = np.array([2, 1, 1, 3, 0], np.float32)
    o2, _ = mmr(None, x, 5, 0.0, relevance=rel2)
    np.testing.assert_array_equal(o2, ref_mmr(rel2.astype(np.float64), ref_similarity(x, "ip"), 5, 0.0)[0])
    assert o2[0] == 3


def test_mmr_empty_and_k_zero() -> None:
    x = np.zeros((0, 4), np.float32)
    o, s = mmr(np.ones(4), x, 3)
    assert o.shape == (0,) and s.shape == (0,)
    o, s = mmr(np.ones(4), np.ones((3, 4), np.float32), 0)
    assert o.shape == (0,) and o.dtype == np.int64


def test_mmr_batch_equals_single_calls() -> None:
    rng = np.random.default_rng(11)
    sizes = [0, 1, 5, 40, 17, 3]
    cands = [rng.standard_normal((n, 24)).astype(np.float32) for n in sizes]
    queries = [rng.standard_normal(24).astype(np.float32) for _ in sizes]
    lambdas = rng.uniform(0, 1, len(sizes))
    got = mmr_batch(queries, cands, 6, lambdas, metric="cosine", threads=2)
    assert len(got) == len(sizes)
    for b in range(len(sizes)):
        want = mmr(queries[b], cands[b], 6, float(np.float32(lambdas[b])), metric="cosine")
        np.testing.assert_array_equal(got[b][0], want[0])
        np.testing.assert_array_equal(got[b][1], want[1])
    # int8 with scales and relevance given for some queries only.
    codes = [rng.integers(-127, 128, size=(n, 24), dtype=np.int8) for n in sizes]
    scales = [rng.uniform(0.5, 1.5, n).astype(np.float32) for n in sizes]
    rels = [None if b % 2 else rng.standard_normal(n).astype(np.float32) for b, n in enumerate(sizes)]
    got8 = mmr_batch(queries, codes, 4, 0.5, rels, metric="l2", scales=scales)
    for b in range(len(sizes)):
        want = mmr(queries[b], codes[b], 4, 0.5, rels[b], metric="l2", scales=scales[b])
        np.testing.assert_array_equal(got8[b][0], want[0])
        np.testing.assert_array_equal(got8[b][1], want[1])
    assert mmr_batch(None, [], 3) == []


def test_mmr_every_simd_level_agrees() -> None:
    """The same problem at each SIMD level the CPU runs (the level is fixed per process)."""
    script = (
        "import numpy as np, medretrieve as m\n"
        "rng = np.random.default_rng(1)\n"
        "x = rng.standard_normal((80, 100)).astype(np.float32)\n"
        "c = rng.integers(-127, 128, size=(80, 100), dtype=np.int8)\n"
        "q = rng.standard_normal(100).astype(np.float32)\n"
        "print(m.simd_level(), list(m.mmr(q, x, 10, 0.5, metric='l2')[0]), list(m.mmr(q, c, 10, 0.5)[0]))\n"
    )
    outputs = set()
    for level in medretrieve._core.available_simd_levels():
        env = dict(os.environ, MEDRETRIEVE_SIMD=level)
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True)
        name, rest = out.stdout.split(" ", 1)
        assert name == level
        outputs.add(rest)
    assert len(outputs) == 1


@pytest.mark.parametrize(
    "kwargs,error,match",
    [
        (dict(lambda_=-0.1), ValueError, "lambda"),
        (dict(lambda_=1.5), ValueError, "lambda"),
        (dict(lambda_=float("nan")), ValueError, "lambda"),
        (dict(lambda_="0.5"), TypeError, "lambda"),
        (dict(k=-1), ValueError, "k must be >= 0"),
        (dict(k=2.5), TypeError, "k must be an int"),
        (dict(metric="dot"), ValueError, "metric"),
        (dict(device="tpu"), ValueError, "device"),
        (dict(query=np.ones(5)), ValueError, "query must be 1-d with 8"),
        (dict(query=np.array([np.nan] * 8)), ValueError, "NaN"),
        (dict(candidates=np.ones((4, 8), np.int32)), TypeError, "float32 or int8"),
        (dict(candidates=np.ones(8, np.float32)), ValueError, "2-d"),
        (dict(relevance=np.ones(3)), ValueError, "relevance must be 1-d with 4"),
        (dict(relevance=np.array([1, 2, np.inf, 0])), ValueError, "NaN or inf"),
        (dict(scales=np.ones(4)), ValueError, "only to int8"),
        (dict(query=None), ValueError, "query or a relevance"),
    ],
)
def test_mmr_bad_input(kwargs: dict, error: type, match: str) -> None:
    args = dict(query=np.ones(8, np.float32), candidates=np.eye(4, 8, dtype=np.float32), k=2, lambda_=0.5)
    args.update(kwargs)
    with pytest.raises(error, match=match):
        mmr(**args)


def test_mmr_non_finite_candidates_are_reported() -> None:
    x = np.ones((5, 4), np.float32)
    x[3, 1] = np.nan
    with pytest.raises(ValueError, match="not finite"):
        mmr(np.ones(4), x, 2)
    with pytest.raises(ValueError, match="not finite"):
        mmr(None, x, 3, relevance=np.arange(5.0))
    with pytest.raises(ValueError, match="scales must be >= 0"):
        mmr(np.ones(4), np.ones((2, 4), np.int8), 1, scales=[1.0, -1.0])


def test_mmr_batch_bad_input() -> None:
    x = [np.ones((3, 4), np.float32)] * 2
    with pytest.raises(ValueError, match="one entry per query"):
        mmr_batch([np.ones(4)] * 2, x, 2, [0.5])
    with pytest.raises(ValueError, match="every lambda"):
        mmr_batch([np.ones(4)] * 2, x, 2, [0.5, 2.0])
    with pytest.raises(ValueError, match="queries has 1 entries"):
        mmr_batch([np.ones(4)], x, 2)
    with pytest.raises(ValueError, match="query 1: query must be 1-d"):
        mmr_batch([np.ones(4), np.ones(3)], x, 2)


def test_device_cuda_raises_when_unavailable() -> None:
    if medretrieve.cuda_available():
        pytest.skip("a usable GPU is present")
    x = np.ones((3, 4), np.float32)
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        mmr(np.ones(4), x, 2, device="cuda")
    with pytest.raises(RuntimeError, match="CUDA is not available"):
        rrf([[1, 2]], device="cuda")


# ---------------------------------------------------------------------- RRF


def ref_rrf(lists: Sequence[Sequence[int]], k: float = 60, weights: Optional[Sequence[float]] = None,
            top_n: Optional[int] = None):
    score: Dict[int, float] = defaultdict(float)
    best: Dict[int, int] = {}
    for li, lst in enumerate(lists):
        w = 1.0 if weights is None else float(weights[li])
        seen = set()
        for pos, doc in enumerate(lst):
            doc = int(doc)
            if doc in seen:
                continue
            seen.add(doc)
            score[doc] += w / (k + pos + 1)
            best[doc] = min(best.get(doc, pos + 1), pos + 1)
    ranked = sorted(score, key=lambda d: (-score[d], best[d], d))[:top_n]
    return np.array(ranked, np.int64), np.array([score[d] for d in ranked], np.float32)


@pytest.mark.parametrize("seed", range(6))
def test_rrf_matches_reference(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n_lists = int(rng.integers(1, 6))
    lists = [rng.integers(-5, 40, size=int(rng.integers(0, 50))) for _ in range(n_lists)]  # duplicates likely
    weights = rng.uniform(0, 2, n_lists) if seed % 2 else None
    top_n = [None, 1, 7, 1000][seed % 4]
    k = [60, 0, 1.5][seed % 3]
    ids, scores = rrf(lists, k=k, weights=weights, top_n=top_n)
    want_ids, want_scores = ref_rrf(lists, k, weights, top_n)
    assert ids.dtype == np.int64 and scores.dtype == np.float32
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(scores, want_scores)


def test_rrf_accepts_lists_tuples_and_integer_arrays() -> None:
    a = [5, 3, np.int64(9), 3]  # NumPy integer scalars inside a list are ids too
    b = (9, 1)
    c = np.array([1, 5], np.uint16)
    d = np.array([[7, 5, 9]], np.int32)[:, ::-1][0]  # non-contiguous view
    ids, scores = rrf([a, b, c, d])
    want_ids, want_scores = ref_rrf([a, b, list(c), list(d)])
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(scores, want_scores)


def test_rrf_ties_are_deterministic() -> None:
    # 7 and 3 both rank 1 once: same score, same best rank -> smaller id first.
    ids, _ = rrf([[7, 1], [3, 2]])
    np.testing.assert_array_equal(ids, [3, 7, 1, 2])
    # 10 and 30 tie on score and best rank -> smaller id first.
    ids, scores = rrf([[10, 20, 30], [30, 20, 10]], k=0)
    assert scores[0] == scores[1] > scores[2]
    np.testing.assert_array_equal(ids, [10, 30, 20])
    # Equal scores (1/2 + 1/6 == 1/3 + 1/3), different best ranks: 50 (best rank 2)
    # goes before 40 (best rank 3) although its id is larger.
    ids, scores = rrf([[1, 50, 40, 2, 3, 4], [5, 6, 40, 7, 8, 50]], k=0)
    pos = {int(i): p for p, i in enumerate(ids)}
    assert scores[pos[50]] == scores[pos[40]]
    assert pos[50] + 1 == pos[40]


def test_rrf_empty_inputs() -> None:
    for lists in ([], [[]], [[], np.array([], np.int64)]):
        ids, scores = rrf(lists)
        assert ids.shape == (0,) and scores.shape == (0,)
    ids, _ = rrf([[1, 2, 3]], top_n=0)
    assert ids.shape == (0,)


@pytest.mark.parametrize(
    "lists,kwargs,error,match",
    [
        ([["a", "b"]], {}, TypeError, "not an int"),
        ([[1.0, 2.0]], {}, TypeError, "not an int"),
        ([[np.float32(1.0)]], {}, TypeError, "not an int"),
        ([np.array(["a"])], {}, TypeError, "integer ids"),
        ([np.array([1.0, 2.0])], {}, TypeError, "integer ids"),
        ("abc", {}, TypeError, "ranked id lists"),
        ([[1, 2], [3]], dict(weights=[1.0]), ValueError, "one entry per list"),
        ([[1, 2]], dict(weights=[-1.0]), ValueError, "finite and >= 0"),
        ([[1, 2]], dict(weights=[float("nan")]), ValueError, "finite"),
        ([[1, 2]], dict(k=-1), ValueError, "k must be"),
        ([[1, 2]], dict(k=float("inf")), ValueError, "k must be"),
        ([[1, 2]], dict(top_n=-2), ValueError, "top_n"),
        ([[1, [2]]], {}, TypeError, "not an int"),
        ([[2**70]], {}, ValueError, "int64"),
        ([np.ones((2, 2), np.int64)], {}, ValueError, "1-d"),
    ],
)
def test_rrf_bad_input(lists: object, kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        rrf(lists, **kwargs)  # type: ignore[arg-type]


def test_top_n_zero_still_checks_arguments() -> None:
    """An empty answer is no excuse for accepting bad arguments: the binding checks them whatever top_n is."""
    with pytest.raises(ValueError, match="k must be"):
        rrf([[1, 2]], k=-1, top_n=0)
    with pytest.raises(ValueError, match="finite and >= 0"):
        rrf([[1, 2]], weights=[-1.0], top_n=0)
    with pytest.raises(ValueError, match="minmax"):
        fuse_scores([[1, 2]], [[1.0, 2.0]], method="rank", top_n=0)
    with pytest.raises(ValueError, match="score lists"):
        fuse_scores([[1, 2]], [[1.0, 2.0], [3.0]], top_n=0)


def test_binding_refuses_scales_beside_float32_rows() -> None:
    """The one check of scales lives in the binding: called directly, it refuses them too (not silently ignored)."""
    x = np.eye(4, 8, dtype=np.float32)
    with pytest.raises(ValueError, match="scales apply only to int8"):
        medretrieve._core._mmr(x, 2, 0.5, np.ones(8, np.float32), None, "ip", np.ones(4, np.float32))
    with pytest.raises(ValueError, match="query 1: scales apply only to int8"):
        medretrieve._core._mmr_batch([x, x], 2, 0.5, [np.ones(8, np.float32)] * 2, None, "ip",
                                     [None, np.ones(4, np.float32)])


# ------------------------------------------------------------ score fusion


def ref_fuse(id_lists, score_lists, method="minmax", weights=None, top_n=None):
    fused: Dict[int, float] = {}
    per_list: List[Dict[int, float]] = []
    for ids, scores in zip(id_lists, score_lists):
        best: Dict[int, float] = {}
        for i, s in zip(ids, scores):
            best[int(i)] = max(best.get(int(i), -math.inf), float(np.float32(s)))
        per_list.append(best)
    all_ids = {i for d in per_list for i in d}
    for li, best in enumerate(per_list):
        w = 1.0 if weights is None else weights[li]
        vals = np.array(list(best.values()), np.float64)
        norm: Dict[int, float] = {}
        missing = 0.0
        if len(vals):
            lo, hi, mean, sd = vals.min(), vals.max(), vals.mean(), vals.std()
            for i, s in best.items():
                if method == "minmax":
                    norm[i] = (s - lo) / (hi - lo) if hi > lo else 1.0
                else:
                    norm[i] = (s - mean) / sd if sd > 0 else 0.0
            if method == "zscore":
                missing = (lo - mean) / sd if sd > 0 else 0.0
        for i in all_ids:
            fused[i] = fused.get(i, 0.0) + w * norm.get(i, missing)
    ranked = sorted(fused, key=lambda i: (-fused[i], i))[:top_n]
    return np.array(ranked, np.int64), np.array([fused[i] for i in ranked])


@pytest.mark.parametrize("method", ["minmax", "zscore"])
@pytest.mark.parametrize("seed", range(4))
def test_fuse_scores_matches_reference(method: str, seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    n_lists = int(rng.integers(1, 5))
    ids = [rng.integers(0, 30, size=int(rng.integers(0, 25))) for _ in range(n_lists)]
    scores = [rng.standard_normal(len(i)) * 5 + 3 for i in ids]
    if seed == 3:
        scores[0] = np.full(len(ids[0]), 2.5)  # constant list
    weights = rng.uniform(0.1, 2, n_lists) if seed % 2 else None
    top_n = [None, 5, 1, 100][seed]
    got_ids, got_scores = fuse_scores(ids, scores, method, weights, top_n)
    want_ids, want_scores = ref_fuse(ids, scores, method, weights, top_n)
    np.testing.assert_allclose(got_scores, want_scores, rtol=1e-5, atol=1e-6)
    # Ids agree wherever the fused scores are not (near-)tied.
    gaps = np.abs(np.diff(want_scores)) if len(want_scores) > 1 else np.array([])
    if (gaps > 1e-5).all():
        np.testing.assert_array_equal(got_ids, want_ids)


def test_fuse_scores_missing_ids_rules() -> None:
    ids, scores = fuse_scores([[1, 2, 3], [3, 4]], [[3.0, 2.0, 1.0], [10.0, 0.0]], "minmax")
    # minmax: 1 -> 1 + 0, 3 -> 0 + 1, 2 -> 0.5, 4 -> 0
    np.testing.assert_array_equal(ids, [1, 3, 2, 4])
    np.testing.assert_allclose(scores, [1.0, 1.0, 0.5, 0.0])
    ids, scores = fuse_scores([[1, 2], [3]], [[1.0, 3.0], [7.0]], "zscore")
    # list 0: z = -1, +1 (missing -> -1); list 1 constant -> 0 (missing -> 0)
    np.testing.assert_array_equal(ids, [2, 1, 3])  # 1 and 3 tie at -1: smaller id first
    np.testing.assert_allclose(scores, [1.0, -1.0, -1.0])
    ids, scores = fuse_scores([[5, 5, 6]], [[0.0, 4.0, 2.0]], "minmax")  # duplicate keeps its best score
    np.testing.assert_array_equal(ids, [5, 6])
    np.testing.assert_allclose(scores, [1.0, 0.0])


@pytest.mark.parametrize(
    "args,kwargs,error,match",
    [
        (([[1, 2]], [[1.0]]), {}, ValueError, "one score per id"),
        (([[1, 2]], [[1.0, 2.0], [3.0]]), {}, ValueError, "score lists"),
        (([[1, 2]], [[1.0, float("nan")]]), {}, ValueError, "not finite"),
        (([[1, 2]], [["a", "b"]]), {}, TypeError, "numeric"),
        (([[1, 2]], [[1.0, 2.0]]), dict(method="rank"), ValueError, "minmax"),
        (([[1, 2]], [[1.0, 2.0]]), dict(weights=[1.0, 2.0]), ValueError, "one entry per list"),
    ],
)
def test_fuse_scores_bad_input(args: tuple, kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        fuse_scores(*args, **kwargs)


# ------------------------------------------------------------ lambda policy


def test_lambda_policy_shape() -> None:
    for qtype in ("yesno", "factoid", "list", "summary", "symptom", "treatment", "test", "general"):
        assert 0.3 <= lambda_for(qtype) <= 0.9
    assert lambda_for("yesno") >= 0.85 and lambda_for("factoid") >= 0.8 and lambda_for("test") >= 0.75
    assert lambda_for("treatment") <= 0.35 and lambda_for("list") <= 0.4 and lambda_for("summary") <= 0.45
    assert lambda_for("Treatment options") == lambda_for("treatment")
    assert lambda_for("yes/no") == lambda_for("YESNO") == lambda_for("yesno")
    assert lambda_for("something else") == lambda_for("general") == 0.5


def test_lambda_overrides_and_table_edits(monkeypatch: pytest.MonkeyPatch) -> None:
    assert lambda_for("list", {"list": 0.6}) == 0.6
    assert lambda_for("Treatment options", {"treatment": 0.45}) == 0.45
    assert lambda_for("new_type", {"new_type": 0.2}) == 0.2
    monkeypatch.setitem(fusion.LAMBDA_POLICY, "general", 0.55)
    assert lambda_for("unheard-of") == 0.55
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        lambda_for("list", {"list": 1.2})
    with pytest.raises(TypeError):
        lambda_for(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        lambda_for("list", [("list", 0.5)])  # type: ignore[arg-type]
