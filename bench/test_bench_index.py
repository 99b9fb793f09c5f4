"""pytest-benchmark: single-query search latency of medretrieve (float32, int8) against hnswlib, same data and ef.

    nice python -m pytest bench/test_bench_index.py --benchmark-columns=min,median,mean,ops -q

20k embedding-like 768-d vectors (bench/datagen.py), M=16, ef_construction=100, ef=64, k=10, one thread.
Compare the rows of one run (ratios), not absolute numbers. The gate fails the run when an int8 search is slower
than hnswlib's at the median (ratio gate of medretrieve's pytest plugin: both timed in the same rounds).
"""
from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import datagen  # noqa: E402

import medretrieve  # noqa: E402

N, EF, K = 20_000, 64, 10


@pytest.fixture(scope="module")
def data() -> tuple[np.ndarray, np.ndarray]:
    base, queries, _ = datagen.load(datagen.DataSpec(N, 1000))
    return base, queries[:200]


@pytest.fixture(scope="module")
def indexes(data):
    hnswlib = pytest.importorskip("hnswlib")
    base, _ = data
    built = {}
    ref = hnswlib.Index("ip", base.shape[1])
    ref.init_index(N, M=16, ef_construction=100)
    ref.add_items(base, num_threads=2)
    ref.set_ef(EF)
    built["hnswlib"] = lambda q: ref.knn_query(q, K, num_threads=1)
    for dtype in ("float32", "int8"):
        idx = medretrieve.Index("ip", base.shape[1])
        idx.init_index(N, M=16, ef_construction=100, dtype=dtype)
        idx.add(base, num_threads=2)
        idx.set_ef(EF)
        built[dtype] = (lambda i: lambda q: i.search(q, K, num_threads=1))(idx)
    return built


@pytest.mark.parametrize("name", ["hnswlib", "float32", "int8"])
def test_single_query_latency(benchmark, indexes, data, name) -> None:
    search = indexes[name]
    queries = data[1]
    state = {"i": 0}

    def one() -> None:
        search(queries[state["i"] % len(queries)])
        state["i"] += 1

    benchmark.group = f"search k={K} ef={EF} n={N}"
    benchmark.pedantic(one, rounds=600, iterations=1, warmup_rounds=50)


def test_gate_int8_not_slower_than_hnswlib(benchmark, latency_gate, indexes, data) -> None:
    queries = data[1]
    state = {"i": 0, "j": 0}

    def int8() -> None:
        indexes["int8"](queries[state["i"] % len(queries)])
        state["i"] += 1

    def hnswlib() -> None:
        indexes["hnswlib"](queries[state["j"] % len(queries)])
        state["j"] += 1

    benchmark.group = f"gate: int8 vs hnswlib k={K} ef={EF} n={N}"
    latency_gate.ratio(benchmark, int8, hnswlib, rounds=600, warmup_rounds=50, p50_ratio=1.0)
