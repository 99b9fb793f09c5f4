"""hnswlib's result conventions, shared by ``Index.knn_query`` and ``BFIndex.knn_query``."""
from __future__ import annotations

from typing import Any

import numpy as np


def knn_results(ids: np.ndarray, scores: np.ndarray, space: str, why_short: str) -> tuple[np.ndarray, np.ndarray]:
    """Native ``(ids int64, similarities)`` as hnswlib's ``(labels uint64, distances float32)``: ``1 - ip`` (ip),
    ``1 - cos`` (cosine), squared L2 (l2). A padded row (fewer than k results) raises RuntimeError, as hnswlib."""
    if (ids < 0).any():
        raise RuntimeError(f"Cannot return the results in a contiguous 2D array. {why_short}")
    dist: Any = -scores if space == "l2" else 1.0 - scores
    return ids.astype(np.uint64), dist.astype(np.float32, copy=False)
