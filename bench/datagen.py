"""Seeded synthetic "embedding-like" vectors and exact ground truth for the ANN benchmarks.

Real sentence embeddings live near a low-dimensional manifold, cluster by topic, share a common mean direction
(every vector of a model leans the same way) and are normalised. The generator reproduces that: clustered latent
points (``latent`` dims, ~32-64) pushed through a fixed random projection to ``dim`` dims, plus small isotropic
noise and a shared mean offset, then normalised. Queries come from the same distribution (same centres and
projection, different samples), as questions and passages of one corpus do.

Ground truth is exact float32 search (numpy matrix products in chunks), cached under ``--cache`` (default
``/tmp/medretrieve_bench``) so repeated benchmark runs skip it.

    python bench/datagen.py --n 20000 --nq 1000       # writes the cache and prints a summary
"""
from __future__ import annotations

import argparse
import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import numpy as np

DEFAULT_CACHE = Path(os.environ.get("MEDRETRIEVE_BENCH_CACHE", "/tmp/medretrieve_bench"))


@dataclass(frozen=True)
class DataSpec:
    n: int
    nq: int
    dim: int = 768
    latent: int = 48
    clusters: int = 256
    noise: float = 0.08
    offset: float = 0.6
    seed: int = 0

    def key(self) -> str:
        return hashlib.sha1(repr(self).encode()).hexdigest()[:12]


def _structure(spec: DataSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(spec.seed)
    proj = rng.standard_normal((spec.latent, spec.dim)).astype(np.float32) / np.sqrt(spec.latent)
    # Cluster sizes and spreads vary like topics do.
    centres = rng.standard_normal((spec.clusters, spec.latent)).astype(np.float32)
    mean_dir = rng.standard_normal(spec.dim).astype(np.float32)
    mean_dir /= np.linalg.norm(mean_dir)
    return proj, centres, mean_dir


def sample_batches(spec: DataSpec, n: int, stream: int, chunk: int = 50_000) -> Iterator[np.ndarray]:
    """``n`` normalised rows in batches of ``chunk`` (the batches of :func:`sample`, so the first rows of a larger
    ``n`` are the rows of a smaller one); ``stream`` 0 = base vectors, 1 = queries."""
    proj, centres, mean_dir = _structure(spec)
    rng = np.random.default_rng([spec.seed, stream])
    weights = rng.dirichlet(np.full(spec.clusters, 2.0))
    spreads = rng.uniform(0.4, 0.9, spec.clusters).astype(np.float32)
    for start in range(0, n, chunk):
        m = min(chunk, n - start)
        c = rng.choice(spec.clusters, size=m, p=weights)
        z = centres[c] + spreads[c, None] * rng.standard_normal((m, spec.latent)).astype(np.float32)
        x = z @ proj
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        x += spec.offset * mean_dir + spec.noise * rng.standard_normal((m, spec.dim)).astype(np.float32) / np.sqrt(spec.dim) * 4
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        yield x


def sample(spec: DataSpec, n: int, stream: int, chunk: int = 50_000) -> np.ndarray:
    """``n`` normalised rows; ``stream`` 0 = base vectors, 1 = queries."""
    out = np.empty((n, spec.dim), dtype=np.float32)
    start = 0
    for x in sample_batches(spec, n, stream, chunk):
        out[start:start + len(x)] = x
        start += len(x)
    return out


def exact_knn(base: np.ndarray, queries: np.ndarray, k: int, space: str = "ip", chunk: int = 256) -> np.ndarray:
    """Exact top-k ids (int64 [nq, k]) by float32 matrix products, queries in chunks."""
    out = np.empty((len(queries), k), dtype=np.int64)
    base_sq = np.einsum("ij,ij->i", base, base) if space == "l2" else None
    for s in range(0, len(queries), chunk):
        q = queries[s:s + chunk]
        sim = q @ base.T
        if space == "l2":
            sim = 2 * sim - base_sq[None, :]
        part = np.argpartition(-sim, k, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(sim, part, 1), axis=1, kind="stable")
        out[s:s + len(q)] = np.take_along_axis(part, order, 1)
    return out


def load(spec: DataSpec, k: int = 100, cache: Path = DEFAULT_CACHE) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(base, queries, ground-truth ids [nq, k]) for ``spec``, cached on disk."""
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / f"emb_{spec.key()}_k{k}.npz"
    if path.exists():
        with np.load(path) as z:
            return z["base"], z["queries"], z["gt"]
    base = sample(spec, spec.n, 0)
    queries = sample(spec, spec.nq, 1)
    gt = exact_knn(base, queries, k)
    tmp = path.with_suffix(f".tmp{os.getpid()}.npz")
    np.savez(tmp, base=base, queries=queries, gt=gt)
    os.replace(tmp, path)
    return base, queries, gt


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--nq", type=int, default=1_000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    base, q, gt = load(DataSpec(a.n, a.nq, a.dim, seed=a.seed))
    sims = q[:100] @ base.T
    print(f"base {base.shape} queries {q.shape} gt {gt.shape}")
    print(f"mean cos to nearest: {np.sort(sims, 1)[:, -1].mean():.3f}, to 10th: {np.sort(sims, 1)[:, -10].mean():.3f}, "
          f"median: {np.median(sims):.3f}")
    sv = np.linalg.svd(base[:5000] - base[:5000].mean(0), compute_uv=False)
    energy = np.cumsum(sv**2) / np.sum(sv**2)
    print(f"dims for 90% / 99% of the variance: {int(np.searchsorted(energy, 0.9)) + 1} / {int(np.searchsorted(energy, 0.99)) + 1}")


if __name__ == "__main__":
    main()
