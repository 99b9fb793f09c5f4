"""The benchmarks' ground truth (bench/datagen.py): exact, and deterministic among exact duplicates."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

_spec = importlib.util.spec_from_file_location("bench_datagen", Path(__file__).resolve().parents[2] / "bench" / "datagen.py")
datagen = sys.modules.setdefault("bench_datagen", importlib.util.module_from_spec(_spec))  # dataclasses look it up
_spec.loader.exec_module(datagen)


def _with_duplicates(seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.standard_normal((517, 24)).astype(np.float32)
    base[[40, 130, 301, 499]] = base[7]  # one row five times, spread over the ids
    base[[222, 3]] = base[400]
    queries = np.concatenate([base[[7, 400]] + 0.01 * rng.standard_normal((2, 24)).astype(np.float32),
                              rng.standard_normal((37, 24)).astype(np.float32)])
    return base, queries


def _reference(base: np.ndarray, queries: np.ndarray, k: int, space: str) -> np.ndarray:
    """float64 scores, then (-score, id) order: equal rows have equal scores, so the lower id comes first."""
    b, q = base.astype(np.float64), queries.astype(np.float64)
    scores = q @ b.T if space == "ip" else -((q[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    ids = np.arange(len(base))
    return np.stack([np.lexsort((ids, -row))[:k] for row in scores])


@pytest.mark.parametrize("space", ["ip", "l2"])
@pytest.mark.parametrize("k", [1, 3, 10])
def test_exact_knn_matches_a_float64_reference_and_breaks_ties_to_the_lower_id(space: str, k: int) -> None:
    base, queries = _with_duplicates(seed=k)
    got = datagen.exact_knn(base, queries, k, space=space, chunk=16)  # several chunks, a ragged last one
    np.testing.assert_array_equal(got, _reference(base, queries, k, space))
    assert got[0, :min(k, 5)].tolist() == [7, 40, 130, 301, 499][:k]  # the five equal rows, lower ids first


def test_recall_by_id_misses_an_equal_duplicate_that_recall_with_ties_counts() -> None:
    base, queries = _with_duplicates(seed=0)
    truth = datagen.exact_knn(base, queries, 2)
    assert truth[1].tolist() == [3, 222]  # the query next to row 400 and its two copies
    found = truth.copy()
    found[1, 1] = 400  # an equal row in place of the lower id
    assert datagen.recall_at(found, truth, k=2) == pytest.approx(1 - 0.5 / len(queries))
    assert datagen.recall_with_ties(found, base, queries, k=2) == 1.0
    found[1, 1] = 5  # a worse row
    assert datagen.recall_with_ties(found, base, queries, k=2) == pytest.approx(1 - 0.5 / len(queries))
