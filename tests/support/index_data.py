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


def medcpt_like(n: int, seed: int, dim: int = 768) -> np.ndarray:
    """Unnormalised rows as MedCPT's (bench/datagen.py's medcpt-like shape): 1,000 clusters in a 64-d latent space,
    every row leaning the same way (inner products ~60-70), norms ~N(8, 0.4). The same space for every seed."""
    latent, clusters = 64, 1000
    base = np.random.default_rng(0)
    proj = base.standard_normal((latent, dim)) / np.sqrt(latent)
    centres = base.standard_normal((clusters, latent))
    mean_dir = base.standard_normal(dim)
    mean_dir /= np.linalg.norm(mean_dir)
    weights = base.dirichlet(np.full(clusters, 2.0))
    spreads = base.uniform(0.4, 0.9, clusters)
    rng = np.random.default_rng(seed)
    c = rng.choice(clusters, size=n, p=weights)
    x = (centres[c] + spreads[c, None] * rng.standard_normal((n, latent))) @ proj
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x += 2.0 * mean_dir + 0.08 * 4 * rng.standard_normal((n, dim)) / np.sqrt(dim)
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return (x * rng.normal(8.0, 0.4, (n, 1))).astype(np.float32)


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
