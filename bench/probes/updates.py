"""Recall after vector updates: medretrieve.Index vs hnswlib in the same run.

    python bench/probes/updates.py [--n 20000] [--dim 64] [--rounds 3] [--fraction 0.33]

Builds each index on n random vectors (ip, M=16, ef_construction=100), then, ``rounds`` times, replaces a random
``fraction`` of the vectors with new random ones through ``add_items`` on existing ids (an update). Prints
recall@10 at ef=64 against brute force before and after, and the wall time of the last update round.
"""
from __future__ import annotations

import argparse
import time

import numpy as np


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    return float(np.mean([len(set(a) & set(b)) / truth.shape[1] for a, b in zip(found, truth)]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=20_000)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--fraction", type=float, default=1 / 3)
    args = p.parse_args()
    import medretrieve

    peers = {"medretrieve float32": lambda: medretrieve.Index("ip", args.dim),
             "medretrieve int8": lambda: medretrieve.Index("ip", args.dim)}
    try:
        import hnswlib

        peers["hnswlib"] = lambda: hnswlib.Index("ip", args.dim)
    except ImportError:
        pass
    print(f"| index | recall@10 before | recall@10 after {args.rounds} x {args.fraction:.0%} updates | "
          "last round s |")
    print("|---|---|---|---|")
    for name, make in peers.items():
        rng = np.random.default_rng(0)
        x = rng.standard_normal((args.n, args.dim)).astype(np.float32)
        q = rng.standard_normal((500, args.dim)).astype(np.float32)
        idx = make()
        kw = {"dtype": "int8"} if name.endswith("int8") else {}
        idx.init_index(args.n, M=16, ef_construction=100, **kw)
        idx.add_items(x, np.arange(args.n))
        idx.set_ef(64)
        before = recall(idx.knn_query(q, 10)[0], np.argsort(-(q @ x.T), axis=1)[:, :10])
        for _ in range(args.rounds):
            sel = rng.choice(args.n, int(args.n * args.fraction), replace=False)
            x[sel] = rng.standard_normal((len(sel), args.dim)).astype(np.float32)
            t0 = time.perf_counter()
            idx.add_items(x[sel], sel)
            last = time.perf_counter() - t0
        after = recall(idx.knn_query(q, 10)[0], np.argsort(-(q @ x.T), axis=1)[:, :10])
        print(f"| {name} | {before:.4f} | {after:.4f} | {last:.1f} |", flush=True)


if __name__ == "__main__":
    main()
