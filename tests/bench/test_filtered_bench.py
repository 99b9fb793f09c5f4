"""bench/filtered.py's own pieces: the filters keep the share asked for, a correlated filter's rows lie farther from
the query than a random filter's, the reference is the exact filtered top k, and a cell reports a library that never
reaches the recall target with its best recall instead of a speed."""
from __future__ import annotations

import numpy as np
import pytest
from bench_scripts import load_bench_script


@pytest.fixture(scope="module")
def bench():
    return load_bench_script("filtered")


def _data(n: int = 3000, dim: int = 16) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    centres = rng.standard_normal((12, dim))
    x = centres[rng.integers(0, 12, n)] + 0.3 * rng.standard_normal((n, dim))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[rng.choice(n, 5, replace=False)] + 0.01
    return x.astype(np.float32), (q / np.linalg.norm(q, axis=1, keepdims=True)).astype(np.float32)


def test_filters_keep_the_share_and_correlated_ones_lie_far(bench) -> None:
    x, q = _data()
    owner, centres = bench.cluster_of(x, 30)
    for share in (0.5, 0.1, 0.01):
        random = list(bench.filters(x, q, share, "random", owner, centres))
        far = list(bench.filters(x, q, share, "correlated", owner, centres))
        for query, r, f in zip(q, random, far):
            assert r.sum() == f.sum() == round(share * len(x))
            assert (x[f] @ query).mean() < (x[r] @ query).mean()  # inner product: lower is farther


def test_reference_is_the_exact_filtered_top_k(bench) -> None:
    x, q = _data()
    mask = np.arange(len(x)) % 3 == 0
    top = bench.exact_filtered(x, q[0], mask)
    assert mask[top].all() and len(top) == bench.K
    sims = x @ q[0]
    assert sims[top].min() >= sims[mask][np.argsort(-sims[mask])[bench.K - 1]]


def test_a_library_below_the_target_reports_its_best_recall(bench) -> None:
    class Blind(bench.Lib):
        name = "blind"

        def one(self, q, ef, allowed):
            return np.full(bench.K, -1, np.int64)

    x, q = _data()
    truths = [bench.exact_filtered(x, query, np.ones(len(x), bool)) for query in q]
    assert bench.cell(Blind(), q, [None] * len(q), truths, [16, 32], budget_s=5) == "- (best 0.000)"
