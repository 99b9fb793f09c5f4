"""search_mmr end to end vs plain search at the same fetch_k (issue 3 target: within 1.2x).

Both calls fetch ``fetch_k`` candidates with the same ef from the same int8 / float32 index; search_mmr then
diversifies them natively to ``k``. Single queries, timed in whole passes per method, rotated over three rounds so
the shared box's load hits every method alike. Also times the Python route it replaces (search + get_items + mmr).

    python bench/search_mmr.py --n 20000 --nq 500
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import datagen  # noqa: E402

import medretrieve  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--nq", type=int, default=500)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--fetch-k", type=int, default=50)
    ap.add_argument("--ef", type=int, default=64)
    ap.add_argument("--lambda", dest="lam", type=float, default=0.5)
    args = ap.parse_args()

    spec = datagen.DataSpec(n=args.n, nq=args.nq)
    base, queries, _ = datagen.load(spec, k=10)
    print("| dtype | plain search p50 us | search_mmr p50 us | ratio | search+get_items+mmr p50 us | ratio |")
    print("|---|---|---|---|---|---|")
    for dtype in ("int8", "float32"):
        index = medretrieve.Index("ip", base.shape[1])
        index.init_index(len(base), M=16, ef_construction=100, dtype=dtype)
        index.add(base, num_threads=2)
        def plain_call(q: np.ndarray) -> None:
            index.search(q, args.fetch_k, ef=args.ef)

        def fused_call(q: np.ndarray) -> None:
            index.search_mmr(q, args.k, args.fetch_k, args.lam, ef=args.ef)

        def python_call(q: np.ndarray) -> None:
            ids, scores = index.search(q, args.fetch_k, ef=args.ef)
            medretrieve.mmr(q, index.get_items(ids[0]), args.k, lambda_=args.lam, relevance=scores[0])

        # Whole passes over the queries per method (a method right after another on the same query would find the
        # graph path in cache), rotated over 3 rounds so load drifts hit every method.
        times: dict = {plain_call: [], fused_call: [], python_call: []}
        for _ in range(3):
            for fn in times:
                for q in queries:
                    t0 = time.perf_counter()
                    fn(q)
                    times[fn].append(time.perf_counter() - t0)
        plain, fused, python = times[plain_call], times[fused_call], times[python_call]
        p, f, py = (np.median(v) * 1e6 for v in (plain, fused, python))
        print(f"| {dtype} | {p:.1f} | {f:.1f} | {f / p:.2f}x | {py:.1f} | {py / p:.2f}x |")


if __name__ == "__main__":
    main()
