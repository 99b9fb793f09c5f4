"""Fusion kernels vs straightforward references, measured in the same run.

    MEDRETRIEVE_CORE_DIR=build/<name> PYTHONPATH=python nice python bench/fusion.py [--repeat 200]

* MMR selecting 10 of 200 candidates x 768 d (float32 and int8) vs a NumPy
  implementation (full similarity matrix + vectorised greedy loop).
* RRF of 5 lists x 1,000 ids vs a pure-Python dict implementation.
* Score fusion (min-max) of 5 lists x 1,000 ids vs pure Python.
* mmr_batch of 64 problems vs 64 single mmr calls.

Prints a Markdown table (median microseconds per call, reference / native).
Targets: MMR and RRF >= 20x faster than the reference.
"""
from __future__ import annotations

import os

# One BLAS thread: the native operators run on one core, and on a shared
# machine a multi-threaded BLAS in the reference only measures contention.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics
import time
from collections import defaultdict
from typing import Callable, Dict, List, Sequence, Tuple  # noqa: E402

import numpy as np  # noqa: E402

import medretrieve  # noqa: E402
from medretrieve import fuse_scores, mmr, mmr_batch, rrf  # noqa: E402


def numpy_mmr(q: np.ndarray, x: np.ndarray, k: int, lam: float) -> List[int]:
    """The straightforward NumPy MMR: similarity matrix + greedy loop."""
    rel = x @ q
    sim = x @ x.T
    n = len(x)
    max_sim = np.zeros(n, np.float32)
    alive = np.ones(n, bool)
    order: List[int] = []
    for step in range(min(k, n)):
        vals = lam * rel - (1 - lam) * max_sim
        vals[~alive] = -np.inf
        best = int(np.argmax(vals))
        order.append(best)
        alive[best] = False
        max_sim = sim[:, best] if step == 0 else np.maximum(max_sim, sim[:, best])
    return order


def numpy_mmr_int8(q: np.ndarray, codes: np.ndarray, scales: np.ndarray, k: int, lam: float) -> List[int]:
    return numpy_mmr(q, codes.astype(np.float32) * scales[:, None], k, lam)


def python_rrf(lists: Sequence[Sequence[int]], k: float = 60.0) -> List[Tuple[int, float]]:
    """The pure-Python dict RRF (same rules: first occurrence per list counts)."""
    score: Dict[int, float] = defaultdict(float)
    best: Dict[int, int] = {}
    for lst in lists:
        seen = set()
        for pos, doc in enumerate(lst, 1):
            if doc in seen:
                continue
            seen.add(doc)
            score[doc] += 1.0 / (k + pos)
            if pos < best.get(doc, 1 << 62):
                best[doc] = pos
    ranked = sorted(score, key=lambda d: (-score[d], best[d], d))
    return [(d, score[d]) for d in ranked]


def python_minmax(id_lists: Sequence[Sequence[int]], score_lists: Sequence[Sequence[float]]) -> List[int]:
    fused: Dict[int, float] = defaultdict(float)
    for ids, scores in zip(id_lists, score_lists):
        lo, hi = min(scores), max(scores)
        for i, s in zip(ids, scores):
            fused[i] += (s - lo) / (hi - lo) if hi > lo else 1.0
    return sorted(fused, key=lambda i: (-fused[i], i))


def median_us(fn: Callable[[], object], repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=200)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    rows: List[Tuple[str, float, float]] = []

    # MMR, float32 and int8: 10 of 200 x 768.
    x = rng.standard_normal((200, 768)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[0] + 0.1 * rng.standard_normal(768).astype(np.float32)
    assert list(mmr(q, x, 10, 0.5)[0]) == numpy_mmr(q, x, 10, 0.5)
    rows.append(("MMR float32, 10 of 200 x 768",
                 median_us(lambda: numpy_mmr(q, x, 10, 0.5), args.repeat),
                 median_us(lambda: mmr(q, x, 10, 0.5), args.repeat)))
    scales = np.abs(x).max(1) / 127
    codes = np.round(x / scales[:, None]).astype(np.int8)
    assert list(mmr(q, codes, 10, 0.5, scales=scales)[0]) == numpy_mmr_int8(q, codes, scales, 10, 0.5)
    rows.append(("MMR int8 (+scales), 10 of 200 x 768",
                 median_us(lambda: numpy_mmr_int8(q, codes, scales, 10, 0.5), args.repeat),
                 median_us(lambda: mmr(q, codes, 10, 0.5, scales=scales), args.repeat)))

    # mmr_batch: 64 problems vs 64 single calls (threads = all cores).
    cands = [rng.standard_normal((200, 768)).astype(np.float32) for _ in range(64)]
    queries = [c[0] for c in cands]
    rows.append(("mmr_batch 64 x (10 of 200 x 768) vs 64 mmr calls",
                 median_us(lambda: [mmr(qq, cc, 10, 0.5) for qq, cc in zip(queries, cands)], max(5, args.repeat // 20)),
                 median_us(lambda: mmr_batch(queries, cands, 10, 0.5), max(5, args.repeat // 20))))

    # RRF, 5 lists x 1,000 ids drawn from 3,000 (overlapping lists).
    arrays = [rng.permutation(3000)[:1000].astype(np.int64) for _ in range(5)]
    lists = [a.tolist() for a in arrays]
    ref = python_rrf(lists)
    got_ids, _ = rrf(arrays)
    assert [d for d, _ in ref] == got_ids.tolist()
    py_us = median_us(lambda: python_rrf(lists), args.repeat)
    rows.append(("RRF 5 x 1,000 ids (NumPy int64 arrays in)", py_us, median_us(lambda: rrf(arrays), args.repeat)))
    rows.append(("RRF 5 x 1,000 ids (Python lists in)", py_us, median_us(lambda: rrf(lists), args.repeat)))

    score_arrays = [rng.standard_normal(1000).astype(np.float32) for _ in range(5)]
    score_lists = [s.tolist() for s in score_arrays]
    assert fuse_scores(arrays, score_arrays)[0][:50].tolist() == python_minmax(lists, score_lists)[:50]
    rows.append(("fuse_scores minmax 5 x 1,000",
                 median_us(lambda: python_minmax(lists, score_lists), args.repeat),
                 median_us(lambda: fuse_scores(arrays, score_arrays), args.repeat)))

    print(f"SIMD level: {medretrieve.simd_level()}; median of {args.repeat} calls")
    print()
    print("| operation | reference (us) | medretrieve (us) | speed-up |")
    print("|---|---:|---:|---:|")
    for name, ref_us, ours_us in rows:
        print(f"| {name} | {ref_us:,.1f} | {ours_us:,.1f} | {ref_us / ours_us:,.1f}x |")


if __name__ == "__main__":
    main()
