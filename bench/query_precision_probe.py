"""Probe: how much of int8 search's lost recall is the query's rounding, and how much the stored codes'.

    python bench/query_precision_probe.py [--shapes minilm-bioasq,highdim-200d-100c,embedding,noisy-100d-1000c]

For each shape (bench/datagen.py), the rows are stored in an int8 index and read back (``get_items``: centre +
scale x code, exactly what the search scores against). Brute force over those rows then ranks every row for each
query twice: with the query rounded to 8 bits as the search rounds it (one symmetric scale, round half to even),
and with the float query; as in the search, the query's product with the centre is taken exactly and only its
product with the residual uses the rounded query. recall@10 against the exact float top 10. No graph, no timing: the difference between
the two columns is the most a finer query could buy; what both lose against 1.0 is the codes' rounding.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import datagen  # noqa: E402

import medretrieve  # noqa: E402
from medretrieve import _core  # noqa: E402

K = 10


def stored_rows(base: np.ndarray, sample: int = 20_000) -> tuple[np.ndarray, np.ndarray]:
    """(residuals of the rows as an int8 inner-product index holds them, the index's centre)."""
    index = medretrieve.Index("ip", base.shape[1])
    index.init_index(len(base), M=8, ef_construction=16, dtype="int8")
    index.train(base[:sample])  # the centre is the mean of these rows
    index.add(base, num_threads=2)
    centre = base[:sample].mean(axis=0, dtype=np.float64).astype(np.float32)
    return index.get_items(np.arange(len(base))) - centre, centre


def rounded_queries(q: np.ndarray) -> np.ndarray:
    """The queries as the search rounds them (no centre for inner products: one symmetric scale per query)."""
    out = np.empty_like(q)
    for i, row in enumerate(q):
        code, scale = _core._quantize_i8(row)
        out[i] = code * np.float32(scale)
    return out


def flat_recall(residuals: np.ndarray, centre: np.ndarray, exact_q: np.ndarray, residual_q: np.ndarray,
                truth: np.ndarray) -> float:
    scores = (exact_q @ centre)[:, None] + residual_q @ residuals.T
    return datagen.recall_at(np.argsort(-scores, axis=1)[:, :K], truth, K)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="minilm-bioasq,highdim-200d-100c,embedding,noisy-100d-1000c")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--nq", type=int, default=500)
    a = ap.parse_args()
    print("| shape | recall@10, 8-bit query | recall@10, float query | difference |")
    print("|---|---|---|---|")
    for shape in a.shapes.split(","):
        base, queries, truth, _ = datagen.load_shape(shape, a.n, a.nq)
        residuals, centre = stored_rows(base)
        rounded = flat_recall(residuals, centre, queries, rounded_queries(queries), truth)
        exact = flat_recall(residuals, centre, queries, queries, truth)
        print(f"| {shape} | {rounded:.4f} | {exact:.4f} | {exact - rounded:+.4f} |", flush=True)


if __name__ == "__main__":
    main()
