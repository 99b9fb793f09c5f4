"""Filtered vector search at every selectivity: medretrieve's row filter (``search(allowed=)``) against hnswlib with a
filter callable and faiss HNSW with an ``IDSelectorBitmap``, same vectors, same M / ef_construction, one run.

Filters keep 50%, 10%, 1%, 0.1% and 0.01% of the rows, each two ways: ``random`` (one filter per share, rows drawn
at random) and ``correlated`` (per query: the rows of the clusters farthest from the query, whole clusters until the
share is reached; a field set by cluster, so the allowed rows lie far from the query's neighbours). Recall@10 is
against the exact filtered search (float32 NumPy over the allowed rows). Each library sweeps ``ef``; per cell the
table gives the cheapest ef reaching the recall target (0.95): QPS (recall, ef, single-query p50 / p99 ms; one
thread, one query per call, the filter passed as each library takes it; each query's best of 3 rounds); ``-`` with
the best recall seen when no ef reaches the target.
The bitsets are built before timing (a caller caches one per filter); the unfiltered p99 of each library is the
first line.

    nice python bench/filtered.py --n 100000 --dim 384 --nq 100
    MEDRETRIEVE_SIMD=avx2 nice python bench/filtered.py --n 100000 --dim 384 --nq 100
    nice python bench/filtered.py --n 1000000 --dim 768 --libs medretrieve      # the issue's size (slow here)
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import datagen  # noqa: E402

import medretrieve  # noqa: E402
from medretrieve.index import pack_allowed  # noqa: E402

K = 10
TARGET = 0.95
SHARES = (0.5, 0.1, 0.01, 0.001, 0.0001)
# Each query's time is its best of ROUNDS rounds (a box shared with other work adds stalls of milliseconds to single
# calls), unless a round takes SLOW_ROUND_S or more.
ROUNDS, SLOW_ROUND_S = 3, 5.0


class Lib:
    """One library's index; ``one(q, ef, allowed)`` searches one query with the filter in the library's own form
    (``prepare(mask)`` builds that form, untimed)."""

    name = ""

    def prepare(self, mask: np.ndarray) -> Any:
        return mask

    def one(self, q: np.ndarray, ef: int, allowed: Any) -> np.ndarray:
        raise NotImplementedError


class Medretrieve(Lib):
    def __init__(self, x: np.ndarray, M: int, efc: int, threads: int, dtype: str) -> None:
        self.name = f"medretrieve {dtype}"
        self.idx = medretrieve.Index("ip", x.shape[1])
        self.idx.init_index(len(x), M=M, ef_construction=efc, dtype=dtype)
        self.idx.add(x, num_threads=threads)
        self.idx.set_num_threads(1)

    def prepare(self, mask: np.ndarray) -> Any:
        return None if mask is None else pack_allowed(mask)

    def one(self, q: np.ndarray, ef: int, allowed: Any) -> np.ndarray:
        return self.idx.search(q, K, ef=ef, allowed=allowed)[0][0]


class Hnswlib(Lib):
    name = "hnswlib (callable)"

    def __init__(self, x: np.ndarray, M: int, efc: int, threads: int) -> None:
        import hnswlib

        self.idx = hnswlib.Index("ip", x.shape[1])
        self.idx.init_index(len(x), M=M, ef_construction=efc)
        self.idx.add_items(x, np.arange(len(x)), num_threads=threads)

    def prepare(self, mask: np.ndarray) -> Any:
        if mask is None:
            return None
        keep = mask.tolist()
        return keep.__getitem__  # a list's item: the cheapest Python callable on an id

    def one(self, q: np.ndarray, ef: int, allowed: Any) -> np.ndarray:
        self.idx.set_ef(ef)
        try:
            return self.idx.knn_query(q, K, num_threads=1, filter=allowed)[0][0].astype(np.int64)
        except RuntimeError:  # fewer than k found: hnswlib raises
            return np.full(K, -1, np.int64)


class Faiss(Lib):
    name = "faiss HNSWFlat (IDSelectorBitmap)"

    def __init__(self, x: np.ndarray, M: int, efc: int, threads: int) -> None:
        import faiss

        self.faiss = faiss
        faiss.omp_set_num_threads(threads)
        self.idx = faiss.IndexHNSWFlat(x.shape[1], M, faiss.METRIC_INNER_PRODUCT)
        self.idx.hnsw.efConstruction = efc
        self.idx.add(x)
        faiss.omp_set_num_threads(1)

    def prepare(self, mask: np.ndarray) -> Any:
        if mask is None:
            return None
        bitmap = np.packbits(mask, bitorder="little")
        return bitmap, self.faiss.IDSelectorBitmap(len(mask), self.faiss.swig_ptr(bitmap))

    def one(self, q: np.ndarray, ef: int, allowed: Any) -> np.ndarray:
        params = self.faiss.SearchParametersHNSW(efSearch=ef)
        if allowed is not None:
            params.sel = allowed[1]
        return self.idx.search(q[None, :], K, params=params)[1][0]


def cluster_of(x: np.ndarray, clusters: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(cluster id per row, centres): nearest of ``clusters`` rows drawn as centres (one assignment pass)."""
    centres = x[np.random.default_rng(seed).choice(len(x), clusters, replace=False)]
    owner = np.empty(len(x), np.int32)
    for s in range(0, len(x), 20_000):
        owner[s:s + 20_000] = np.argmax(x[s:s + 20_000] @ centres.T, axis=1)
    return owner, centres


def filters(x: np.ndarray, q: np.ndarray, share: float, kind: str, owner: np.ndarray, centres: np.ndarray
            ) -> Iterator[np.ndarray]:
    """One bool mask per query: the same random one, or the far clusters of each query (correlated)."""
    n = len(x)
    want = max(1, round(share * n))
    if kind == "random":
        mask = np.zeros(n, bool)
        mask[np.random.default_rng(int(share * 1e6)).choice(n, want, replace=False)] = True
        for _ in q:
            yield mask
        return
    sizes = np.bincount(owner, minlength=len(centres))
    for query in q:
        mask = np.zeros(n, bool)
        taken = 0
        for c in np.argsort(centres @ query):  # farthest clusters first
            rows = np.flatnonzero(owner == c)[: want - taken]
            mask[rows] = True
            taken += len(rows)
            if taken >= want or not sizes[c]:
                break
        yield mask


def exact_filtered(x: np.ndarray, query: np.ndarray, mask: np.ndarray) -> np.ndarray:
    rows = np.flatnonzero(mask)
    sims = x[rows] @ query
    top = np.argsort(-sims, kind="stable")[:K]
    return rows[top]


def measure(lib: Lib, q: np.ndarray, masks: list[np.ndarray], truths: list[np.ndarray], ef: int
            ) -> tuple[float, float, float, float]:
    """(recall, p50 ms, p99 ms, QPS) of single-query filtered searches at this ef."""
    prepared = [lib.prepare(m) for m in masks]
    for i in range(min(5, len(q))):  # warm-up
        lib.one(q[i], ef, prepared[i])
    times = np.full(len(q), np.inf)
    hits = want = 0
    clock = time.perf_counter
    for round_ in range(ROUNDS):
        for i, query in enumerate(q):
            t = clock()
            found = lib.one(query, ef, prepared[i])
            times[i] = min(times[i], clock() - t)
            if round_ == 0:
                hits += len(set(found.tolist()) & set(truths[i].tolist()))
                want += len(truths[i])
        if times.sum() > SLOW_ROUND_S:  # a slow cell: one round
            break
    return hits / max(want, 1), float(np.percentile(times, 50) * 1e3), float(np.percentile(times, 99) * 1e3), \
        float(len(q) / times.sum())


def cell(lib: Lib, q: np.ndarray, masks: list[np.ndarray], truths: list[np.ndarray], efs: list[int],
         budget_s: float) -> str:
    """The cheapest ef reaching TARGET: 'QPS (recall, ef, p50/p99 ms)', or '-' with the best recall seen."""
    best = 0.0
    start = time.monotonic()
    for ef in efs:
        r, p50, p99, qps = measure(lib, q, masks, truths, ef)
        best = max(best, r)
        if r >= TARGET:
            return f"{qps:,.0f} ({r:.3f}, ef {ef}, {p50:.2f}/{p99:.2f})"
        if time.monotonic() - start > budget_s:
            break
    return f"- (best {best:.3f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384)
    ap.add_argument("--nq", type=int, default=100)
    ap.add_argument("--M", type=int, default=16)
    ap.add_argument("--efc", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2, help="build threads")
    ap.add_argument("--efs", default="16,32,64,128,256,512")
    ap.add_argument("--shares", default=",".join(str(s) for s in SHARES))
    ap.add_argument("--libs", default="medretrieve,hnswlib,faiss", help="medretrieve, medretrieve-int8, hnswlib, faiss")
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per cell before giving up on higher ef")
    a = ap.parse_args()
    efs = [int(e) for e in a.efs.split(",")]
    spec = datagen.DataSpec(a.n, a.nq, dim=a.dim)
    x, q, _ = datagen.load(spec, k=K)
    owner, centres = cluster_of(x, max(16, a.n // 500))
    makers: dict[str, Callable[[], Lib]] = {
        "medretrieve": lambda: Medretrieve(x, a.M, a.efc, a.threads, "float32"),
        "medretrieve-int8": lambda: Medretrieve(x, a.M, a.efc, a.threads, "int8"),
        "hnswlib": lambda: Hnswlib(x, a.M, a.efc, a.threads),
        "faiss": lambda: Faiss(x, a.M, a.efc, a.threads),
    }
    libs = []
    for name in a.libs.split(","):
        t = time.perf_counter()
        libs.append(makers[name]())
        print(f"built {libs[-1].name} in {time.perf_counter() - t:.1f} s", flush=True)
    simd = medretrieve.Index("ip", 4)
    simd.init_index(1)
    print(f"\n{a.n} x {a.dim} embedding-like (datagen), {a.nq} queries, M={a.M} efc={a.efc}, recall@{K} target "
          f"{TARGET}, SIMD {simd.stats().simd_level}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    cols = [lib.name for lib in libs]
    print("| filter | " + " | ".join(cols) + " |")
    print("|---|" + "---|" * len(cols))
    everything = [None] * len(q)
    truths = [exact_filtered(x, query, np.ones(len(x), bool)) for query in q]
    print("| none | " + " | ".join(cell(lib, q, everything, truths, efs, a.budget) for lib in libs) + " |", flush=True)
    for share in (float(s) for s in a.shares.split(",")):
        for kind in ("random", "correlated"):
            masks = list(filters(x, q, share, kind, owner, centres))
            truths = [exact_filtered(x, query, m) for query, m in zip(q, masks)]
            row = [cell(lib, q, masks, truths, efs, a.budget) for lib in libs]
            print(f"| {share:.2%} {kind} | " + " | ".join(row) + " |", flush=True)


if __name__ == "__main__":
    main()
