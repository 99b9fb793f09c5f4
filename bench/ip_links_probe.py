"""Probe: recall per ef of inner-product indexes on unnormalised data shapes (how links are diversified).

    python bench/ip_links_probe.py [--shapes medcpt-like,embedding,hard-200d-5000c] [--norm 8] [--n 100000]

Every shape of bench/datagen.py with its rows scaled to norms ~N(norm, (norm / 20)^2) (medcpt-like already is), as
MedCPT's vectors are; int8, M=16, ef_construction=100, 2 build threads; recall@10 against the exact inner-product
top 10, with and without keep_float. Recall only (no timing), so a loaded box does not change the figures. Run it
with ``MEDRETRIEVE_CORE_DIR`` pointing at two builds to compare two versions of the graph construction.
"""
from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
import datagen  # noqa: E402
from datagen import recall_at as recall  # noqa: E402

import medretrieve  # noqa: E402
from medretrieve import _core  # noqa: E402

K = 10


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="medcpt-like,embedding,hard-200d-5000c")
    ap.add_argument("--norm", type=float, default=8.0)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--nq", type=int, default=1_000)
    ap.add_argument("--efs", default="16,32,64,128,256,1024")
    a = ap.parse_args()
    efs = [int(e) for e in a.efs.split(",")]
    print(f"core: {_core.__file__} ({medretrieve.simd_level()})\n")
    print("| shape | keep_float | build s | " + " | ".join(f"ef {ef}" for ef in efs) + " |")
    print("|---|---|---|" + "---|" * len(efs))
    for shape in a.shapes.split(","):
        fields = dict(datagen.SHAPES[shape])
        fields["norm"] = fields.get("norm") or a.norm
        spec = dataclasses.replace(datagen.DataSpec(n=a.n, nq=a.nq), **fields)
        x, q, gt = datagen.load(spec)
        for keep_float in (False, True):
            idx = medretrieve.Index("ip", x.shape[1])
            idx.init_index(len(x), M=16, ef_construction=100, dtype="int8", keep_float=keep_float)
            t = time.perf_counter()
            idx.add(x, num_threads=2)
            built = time.perf_counter() - t
            cells = [f"{recall(idx.search(q, K, ef=ef, num_threads=2)[0], gt):.4f}" for ef in efs]
            name = shape if shape == "medcpt-like" else f"{shape}, norms ~N({a.norm:g}, {a.norm / 20:g}^2)"
            print(f"| {name} | {keep_float} | {built:.1f} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
