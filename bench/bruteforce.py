"""Exact search: medretrieve's BFIndex (hnswlib's API over the native flat index) vs hnswlib's BFIndex, same run.

    MEDRETRIEVE_CORE_DIR=build/<name> PYTHONPATH=python flock /tmp/bench.lock nice python bench/bruteforce.py

For each data shape: 200 queries, k=10, without a filter and with a Python filter (even ids, as hnswlib's
``bindings_test_filter.py``), on one thread and on every core; both indexes are float32 (exact). Each SIMD level in
``--simd`` (``native``: the best this CPU has; ``avx2``: ``MEDRETRIEVE_SIMD=avx2``, as on a machine without AVX-512)
runs in a child process of its own. Prints a Markdown table: median seconds per 200-query batch over ``--repeat``
batches, the two libraries' batches interleaved (so load changes hit both alike), and hnswlib / medretrieve (> 1:
ours faster). The ids both return are checked equal (exact search: any difference is a bug, not noise).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
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


def median_seconds(fns: Tuple[Callable[[], Any], Callable[[], Any]], repeat: int) -> Tuple[float, float]:
    """Median seconds of each of two calls, run alternately (one warm-up each first)."""
    times: Tuple[List[float], List[float]] = ([], [])
    for fn in fns:
        fn()
    for _ in range(repeat):
        for fn, out in zip(fns, times):
            t = time.perf_counter()
            fn()
            out.append(time.perf_counter() - t)
    return statistics.median(times[0]), statistics.median(times[1])


def build(cls: Any, x: np.ndarray) -> Any:
    index = cls("l2", x.shape[1])
    index.init_index(max_elements=len(x))
    index.add_items(x)
    return index


def table_rows(queries: int, repeat: int) -> None:
    """One table row per shape, filter and thread count, at the SIMD level this process runs."""
    level = medretrieve.simd_level()
    for kind, n, dim in SHAPES:
        x = data(kind, n, dim, seed=1)
        q = data(kind, queries, dim, seed=2)
        theirs, ours = build(hnswlib.BFIndex, x), build(medretrieve.BFIndex, x)
        even: Optional[Callable[[int], bool]]
        for even in (None, lambda label: label % 2 == 0):
            for threads in (1, -1):
                def run(index: Any, even: Any = even, threads: int = threads) -> np.ndarray:
                    return index.knn_query(q, k=10, num_threads=threads, filter=even)[0]

                if not np.array_equal(run(theirs), run(ours)):
                    raise SystemExit(f"different ids on {kind} {n}x{dim} filter={even is not None}")
                t_theirs, t_ours = median_seconds((lambda: run(theirs), lambda: run(ours)), repeat)
                print(f"| {level} | {kind} | {n:,} x {dim} | {'even ids' if even else 'none'} | "
                      f"{'1' if threads == 1 else 'all'} | {t_theirs:.4f} | {t_ours:.4f} | {t_theirs / t_ours:.2f}x |",
                      flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--simd", default="native,avx2", help="comma-separated levels, each in a child process")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        table_rows(args.queries, args.repeat)
        return
    print(f"k=10, {args.queries} queries per batch, median of {args.repeat} interleaved batches, "
          f"{os.cpu_count()} cores\n")
    print("| SIMD | data | rows x dim | filter | threads | hnswlib BFIndex (s) | medretrieve BFIndex (s) "
          "| hnswlib / ours |")
    print("|---|---|---|---|---:|---:|---:|---:|", flush=True)
    for level in args.simd.split(","):
        env = dict(os.environ)
        env.pop("MEDRETRIEVE_SIMD", None)
        if level != "native":
            env["MEDRETRIEVE_SIMD"] = level
        child = [sys.executable, __file__, "--child", "--repeat", str(args.repeat), "--queries", str(args.queries)]
        if subprocess.run(child, env=env).returncode:
            raise SystemExit(f"the {level} run failed")


if __name__ == "__main__":
    main()
