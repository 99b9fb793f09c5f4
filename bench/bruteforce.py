"""Exact search: medretrieve's BFIndex (hnswlib's API over the native flat index) vs hnswlib's BFIndex, same run.

    MEDRETRIEVE_CORE_DIR=build/<name> PYTHONPATH=python flock /tmp/bench.lock nice python bench/bruteforce.py

For each data shape: 200 queries, k=10, without a filter and with a Python filter (even ids, as hnswlib's
``bindings_test_filter.py``), on one thread and on every core; both indexes are float32 (exact). Prints a Markdown
table: median seconds per 200-query batch over ``--repeat`` batches, and hnswlib / medretrieve (> 1: ours faster).
The ids both return are checked equal (exact search: any difference is a bug, not noise).
"""
from __future__ import annotations

import argparse
import statistics
import time
from typing import Any, Callable, List, Optional, Tuple

import hnswlib
import numpy as np

import medretrieve

SHAPES: List[Tuple[str, int, int]] = [("uniform", 10_000, 16), ("uniform", 100_000, 32), ("embedding", 20_000, 384)]


def data(kind: str, n: int, dim: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if kind == "uniform":  # hnswlib's own tests' data
        return rng.random((n, dim), dtype=np.float32)
    centres = rng.standard_normal((64, dim)).astype(np.float32)  # clustered, as sentence embeddings
    return centres[rng.integers(0, 64, n)] + 0.3 * rng.standard_normal((n, dim)).astype(np.float32)


def median_seconds(fn: Callable[[], Any], repeat: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def build(cls: Any, x: np.ndarray) -> Any:
    index = cls("l2", x.shape[1])
    index.init_index(max_elements=len(x))
    index.add_items(x)
    return index


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--queries", type=int, default=200)
    args = ap.parse_args()
    print(f"medretrieve SIMD level: {medretrieve.simd_level()}; k=10, {args.queries} queries per batch, "
          f"median of {args.repeat} batches\n")
    print("| data | rows x dim | filter | threads | hnswlib BFIndex (s) | medretrieve BFIndex (s) | hnswlib / ours |")
    print("|---|---|---|---:|---:|---:|---:|")
    for kind, n, dim in SHAPES:
        x = data(kind, n, dim, seed=1)
        q = data(kind, args.queries, dim, seed=2)
        theirs, ours = build(hnswlib.BFIndex, x), build(medretrieve.BFIndex, x)
        even: Optional[Callable[[int], bool]]
        for even in (None, lambda label: label % 2 == 0):
            for threads in (1, -1):
                def run(index: Any, even: Any = even, threads: int = threads) -> np.ndarray:
                    return index.knn_query(q, k=10, num_threads=threads, filter=even)[0]

                if not np.array_equal(run(theirs), run(ours)):
                    raise SystemExit(f"different ids on {kind} {n}x{dim} filter={even is not None}")
                t_theirs = median_seconds(lambda: run(theirs), args.repeat)
                t_ours = median_seconds(lambda: run(ours), args.repeat)
                print(f"| {kind} | {n:,} x {dim} | {'even ids' if even else 'none'} | "
                      f"{'1' if threads == 1 else 'all'} | {t_theirs:.4f} | {t_ours:.4f} | {t_theirs / t_ours:.2f}x |")


if __name__ == "__main__":
    main()
