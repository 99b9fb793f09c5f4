"""Probe: does a graph built in L2 on norm-equalised vectors reach further on raw inner products?

    python bench/mips_probe.py [--shape medcpt-like] [--n 100000]

The MIPS-to-L2 reduction: x' = [x, sqrt(R^2 - |x|^2)] with R the largest norm, q' = [q, 0]; then
|q' - x'|^2 = |q|^2 + R^2 - 2 q.x, so L2 order on (q', x') is inner-product order on (q, x), but the graph is built
in a metric space. Both indexes int8 with keep_float (exact re-scoring), M=16, ef_construction=100, 2 threads;
recall@10 against the exact inner-product top 10 (bench/datagen.py shapes, cached under /tmp/medretrieve_bench).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import datagen  # noqa: E402
from datagen import recall_at as recall  # noqa: E402

import medretrieve  # noqa: E402

K = 10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="medcpt-like")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--nq", type=int, default=1_000)
    ap.add_argument("--efs", default="64,256,1024,2048")
    a = ap.parse_args()
    x, q, gt, desc = datagen.load_shape(a.shape, a.n, a.nq)
    norms = np.linalg.norm(x, axis=1)
    r = float(norms.max()) * 1.001
    xa = np.hstack([x, np.sqrt(r * r - norms ** 2)[:, None]]).astype(np.float32)
    qa = np.hstack([q, np.zeros((len(q), 1), np.float32)])
    print(f"{desc}\n\n| graph | build s | " + " | ".join(f"recall@10 ef {ef}" for ef in a.efs.split(",")) + " |")
    print("|---|---|" + "---|" * len(a.efs.split(",")))
    for name, space, data, queries in (("inner product", "ip", x, q), ("L2 on norm-equalised vectors", "l2", xa, qa)):
        idx = medretrieve.Index(space, data.shape[1])
        idx.init_index(len(data), M=16, ef_construction=100, dtype="int8", keep_float=True)
        t = time.perf_counter()
        idx.add(data, num_threads=2)
        built = time.perf_counter() - t
        cells = [f"{recall(idx.search(queries, K, ef=int(ef), num_threads=2)[0], gt):.4f}" for ef in a.efs.split(",")]
        print(f"| {name} | {built:.1f} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
