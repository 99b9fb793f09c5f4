"""pytest-benchmark suite: fusion operators vs their references, in the same run.

    MEDRETRIEVE_CORE_DIR=build/<name> PYTHONPATH=python:bench nice python -m pytest bench/test_bench_fusion.py \
        --benchmark-group-by=group --benchmark-columns=median,iqr,rounds

Each group holds the native operator and its reference on identical inputs;
compare the medians within a group (targets: >= 20x for MMR and RRF). The ``gate`` tests fail the run when a
native operator is less than 10x faster than its reference at the median (ratio gates of medretrieve's pytest
plugin: both timed in the same rounds, so the box's load hits them alike).
"""
from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

from fusion import numpy_mmr, numpy_mmr_int8, python_minmax, python_rrf  # noqa: E402  (bench/fusion.py)
from medretrieve import fuse_scores, mmr, rrf  # noqa: E402

pytest.importorskip("pytest_benchmark")


@pytest.fixture(scope="module")
def mmr_inputs():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((200, 768)).astype(np.float32)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    q = x[0] + 0.1 * rng.standard_normal(768).astype(np.float32)
    scales = (np.abs(x).max(1) / 127).astype(np.float32)
    codes = np.round(x / scales[:, None]).astype(np.int8)
    return q, x, codes, scales


@pytest.fixture(scope="module")
def rrf_inputs():
    rng = np.random.default_rng(1)
    arrays = [rng.permutation(3000)[:1000].astype(np.int64) for _ in range(5)]
    scores = [rng.standard_normal(1000).astype(np.float32) for _ in range(5)]
    return arrays, [a.tolist() for a in arrays], scores, [s.tolist() for s in scores]


@pytest.mark.benchmark(group="mmr-float32-10-of-200x768")
def test_mmr_f32_native(benchmark, mmr_inputs) -> None:
    q, x, _, _ = mmr_inputs
    order, _ = benchmark(mmr, q, x, 10, 0.5)
    assert order.tolist() == numpy_mmr(q, x, 10, 0.5)


@pytest.mark.benchmark(group="mmr-float32-10-of-200x768")
def test_mmr_f32_numpy_reference(benchmark, mmr_inputs) -> None:
    q, x, _, _ = mmr_inputs
    benchmark(numpy_mmr, q, x, 10, 0.5)


@pytest.mark.benchmark(group="mmr-int8-10-of-200x768")
def test_mmr_int8_native(benchmark, mmr_inputs) -> None:
    q, _, codes, scales = mmr_inputs
    order, _ = benchmark(mmr, q, codes, 10, 0.5, scales=scales)
    assert order.tolist() == numpy_mmr_int8(q, codes, scales, 10, 0.5)


@pytest.mark.benchmark(group="mmr-int8-10-of-200x768")
def test_mmr_int8_numpy_reference(benchmark, mmr_inputs) -> None:
    q, _, codes, scales = mmr_inputs
    benchmark(numpy_mmr_int8, q, codes, scales, 10, 0.5)


@pytest.mark.benchmark(group="rrf-5x1000")
def test_rrf_native_arrays(benchmark, rrf_inputs) -> None:
    arrays, lists, _, _ = rrf_inputs
    ids, _ = benchmark(rrf, arrays)
    assert ids.tolist() == [d for d, _ in python_rrf(lists)]


@pytest.mark.benchmark(group="rrf-5x1000")
def test_rrf_native_lists(benchmark, rrf_inputs) -> None:
    _, lists, _, _ = rrf_inputs
    benchmark(rrf, lists)


@pytest.mark.benchmark(group="rrf-5x1000")
def test_rrf_python_reference(benchmark, rrf_inputs) -> None:
    _, lists, _, _ = rrf_inputs
    benchmark(python_rrf, lists)


@pytest.mark.benchmark(group="fuse-minmax-5x1000")
def test_fuse_native(benchmark, rrf_inputs) -> None:
    arrays, lists, scores, score_lists = rrf_inputs
    ids, _ = benchmark(fuse_scores, arrays, scores)
    assert ids[:50].tolist() == python_minmax(lists, score_lists)[:50]


@pytest.mark.benchmark(group="fuse-minmax-5x1000")
def test_fuse_python_reference(benchmark, rrf_inputs) -> None:
    _, lists, _, score_lists = rrf_inputs
    benchmark(python_minmax, lists, score_lists)


@pytest.mark.benchmark(group="gate")
@pytest.mark.parametrize("name", ["mmr-f32", "mmr-int8", "rrf"])
def test_gate_native_at_least_10x_faster(benchmark, latency_gate, mmr_inputs, rrf_inputs, name) -> None:
    q, x, codes, scales = mmr_inputs
    arrays, lists, _, _ = rrf_inputs
    path, reference = {
        "mmr-f32": (lambda: mmr(q, x, 10, 0.5), lambda: numpy_mmr(q, x, 10, 0.5)),
        "mmr-int8": (lambda: mmr(q, codes, 10, 0.5, scales=scales),
                     lambda: numpy_mmr_int8(q, codes, scales, 10, 0.5)),
        "rrf": (lambda: rrf(arrays), lambda: python_rrf(lists)),
    }[name]
    latency_gate.ratio(benchmark, path, reference, rounds=200, p50_ratio=0.1)
