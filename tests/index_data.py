"""Small seeded embedding-like data for the index tests (clustered, shared offset, low intrinsic dimension)."""
from __future__ import annotations

import numpy as np


def embedding_like(n: int, dim: int = 32, seed: int = 0, clusters: int = 12, latent: int = 8) -> np.ndarray:
    """Rows from a fixed clustered latent space (the same for every seed) projected to ``dim`` plus noise."""
    base = np.random.default_rng(1234)
    proj = base.standard_normal((latent, dim)) / np.sqrt(latent)
    centres = base.standard_normal((clusters, latent))
    offset = 0.3 * base.standard_normal(dim)
    rng = np.random.default_rng(seed)
    z = centres[rng.integers(0, clusters, n)] + 0.5 * rng.standard_normal((n, latent))
    return (z @ proj + offset + 0.05 * rng.standard_normal((n, dim))).astype(np.float32)


def exact_topk(x: np.ndarray, q: np.ndarray, k: int, space: str) -> np.ndarray:
    """Ground-truth ids by float64 brute force under the space's similarity."""
    x64, q64 = x.astype(np.float64), q.astype(np.float64)
    if space == "cosine":
        x64 = x64 / np.linalg.norm(x64, axis=1, keepdims=True)
        q64 = q64 / np.linalg.norm(q64, axis=1, keepdims=True)
    if space == "l2":
        sim = -(np.sum(q64**2, 1)[:, None] - 2 * q64 @ x64.T + np.sum(x64**2, 1)[None, :])
    else:
        sim = q64 @ x64.T
    return np.argsort(-sim, axis=1, kind="stable")[:, :k]


def recall(found: np.ndarray, truth: np.ndarray) -> float:
    k = truth.shape[1]
    return float(np.mean([len(set(found[i][:k].tolist()) & set(truth[i].tolist())) / k for i in range(len(truth))]))
