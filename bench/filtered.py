"""Filtered vector search at every selectivity: medretrieve's row filter (``search(allowed=)``) against hnswlib with a
filter callable, faiss HNSW with an ``IDSelectorBitmap`` (``faiss``: float32 rows; ``faiss-sq8``: 8-bit scalar-quantized
rows, the peer of ``medretrieve-int8``), LanceDB (``IVF_HNSW_FLAT``, one partition, ``where(...,
prefilter=True)``) and Chroma (its HNSW, ``where={...}``), same vectors, same M / ef_construction, one run.

Filters keep 50%, 10%, 1%, 0.1% and 0.01% of the rows, each two ways: ``random`` (one filter per share: the rows
whose ``rank``, a random permutation of the row ids, is below the count kept) and ``correlated`` (per query: the
rows of the clusters farthest from the query, whole clusters until the share is reached, the last one by its
``slot``, the row's place in its cluster; a field set by cluster, so the allowed rows lie far from the query's
neighbours). Every row carries ``rank``, ``cluster`` and ``slot``: the databases get the filter as a predicate on
them (SQL for LanceDB, a ``where`` document for Chroma), the others as the same rows' bitset. Recall@10 is
against the exact filtered search (float32 NumPy over the allowed rows). Each library sweeps ``ef``; per cell the
table gives the cheapest ef reaching the recall target (0.95): QPS (recall, ef, single-query p50 / p99 ms; one
thread, one query per call, the filter passed as each library takes it; each query's best of 5 rounds, the
libraries of a row timed in turn in each round, each after an untimed pass, so that a box's drift moves them alike
and each runs with its index in the caches, as alone); ``-`` with the best recall seen and the highest ef tried
when no ef reaches the target (``--budget`` seconds of sweeping a cell by recall end it early: a slow walk at 1M
stops there).
The bitsets are built before timing (a caller caches one per filter), and medretrieve compiles a filter all the
queries share (the random ones) once, untimed too (``Index.compile_filter``; its time and size are printed under
the table; ``--bitsets-only`` passes bitsets); the unfiltered p99 of each library is the first line. The last
column says where each cell's answers lie: the place of a query's 10th true answer among all rows, unfiltered
(median / max over the queries), the least a walk from beside the query must score.

    nice python bench/filtered.py --n 100000 --dim 384 --nq 100 --libs medretrieve-int8,medretrieve,hnswlib,faiss,faiss-sq8
    MEDRETRIEVE_SIMD=avx2 nice python bench/filtered.py --n 100000 --dim 384 --nq 100
    nice python bench/filtered.py --n 100000 --dim 384 --nq 100 --libs lancedb,chroma
    nice python bench/filtered.py --n 1000000 --dim 768 --libs medretrieve      # the issue's size (slow here)
    nice python bench/filtered.py --shape default-bioasq --n 112511 --nq 100    # real vectors: BioASQ at its size

LanceDB runs with ``LANCE_CPU_THREADS=1`` (its build too) and Chroma's HNSW with ``num_threads`` 1 after the build,
both in a temporary directory removed at exit; their ``ef`` is LanceDB's ``ef`` (``nprobes`` 1, the one partition)
and Chroma's ``hnsw.ef_search`` (stored, then the collection opened again: untimed). Their predicates are evaluated
inside each timed call, as a database does; the others' bitsets are built before timing.
"""
from __future__ import annotations

import argparse
import gc
import importlib.util
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import datagen
import medretrieve
from medretrieve.index import pack_allowed

K = 10
TARGET = 0.95
SHARES = (0.5, 0.1, 0.01, 0.001, 0.0001)
# Each query's time is its best of ROUNDS rounds (a box shared with other work adds stalls of milliseconds to single
# calls), unless a round takes SLOW_ROUND_S or more.
ROUNDS, SLOW_ROUND_S = 5, 5.0


@dataclass(frozen=True)
class RowFields:
    """The per-row fields the filters test: ``rank`` (a random permutation of the row ids), ``cluster`` (the row's
    nearest centre) and ``slot`` (the row's place among its cluster's rows, in row order)."""

    rank: np.ndarray
    cluster: np.ndarray
    slot: np.ndarray


@dataclass(frozen=True)
class RowFilter:
    """One filter, as the rows it keeps (``mask``) and as the predicate that keeps them: ``rank < rank_below``
    (random), or ``cluster`` in ``clusters`` or (``cluster == partial[0]`` and ``slot < partial[1]``) (correlated)."""

    mask: np.ndarray
    rank_below: int | None = None
    clusters: tuple[int, ...] = ()
    partial: tuple[int, int] | None = None

    def sql(self) -> str:
        """The predicate as SQL (LanceDB's ``where``)."""
        if self.rank_below is not None:
            return f"rank < {self.rank_below}"
        parts = [f"cluster IN ({', '.join(map(str, self.clusters))})"] if self.clusters else []
        if self.partial is not None:
            parts.append(f"(cluster = {self.partial[0]} AND slot < {self.partial[1]})")
        return " OR ".join(parts)

    def where(self) -> dict[str, Any]:
        """The predicate as a Chroma ``where`` document."""
        if self.rank_below is not None:
            return {"rank": {"$lt": self.rank_below}}
        parts: list[dict[str, Any]] = [{"cluster": {"$in": list(self.clusters)}}] if self.clusters else []
        if self.partial is not None:
            parts.append({"$and": [{"cluster": self.partial[0]}, {"slot": {"$lt": self.partial[1]}}]})
        return parts[0] if len(parts) == 1 else {"$or": parts}


class Lib:
    """One library's index; ``one(q, ef, allowed)`` searches one query with the filter in the library's own form
    (``prepare(row_filter)`` builds that form, untimed; ``None`` is no filter); ``close()`` frees what it holds."""

    name = ""

    def prepare(self, row_filter: RowFilter | None) -> Any:
        return None if row_filter is None else row_filter.mask

    def prepare_all(self, row_filters: list[RowFilter | None]) -> list[Any]:
        """Each query's filter in the library's form (untimed)."""
        return [self.prepare(f) for f in row_filters]

    def one(self, q: np.ndarray, ef: int, allowed: Any) -> np.ndarray:
        raise NotImplementedError

    def close(self) -> None:
        pass


class Medretrieve(Lib):
    """A filter several queries share (the random ones) is compiled once (``Index.compile_filter``), as a service
    keeps it per filter; its compile time and size are reported under the table (``compiled``). A filter of one
    query (the correlated ones) is a plain bitset. ``compile_shared=False``: bitsets only."""

    def __init__(self, x: np.ndarray, M: int, efc: int, threads: int, dtype: str, compile_shared: bool = True
                 ) -> None:
        self.name = f"medretrieve {dtype}"
        self.idx = medretrieve.Index("ip", x.shape[1])
        self.idx.init_index(len(x), M=M, ef_construction=efc, dtype=dtype)
        self.idx.add(x, num_threads=threads)
        self.idx.set_num_threads(1)
        self.compile_shared = compile_shared
        self.compiled: dict[str, str] = {}  # share -> "compile ms, MB": the notes under the table
        self._last: tuple[Any, Any] = (None, None)  # (mask, its compiled filter): one cell sweeps ef over one

    def prepare(self, row_filter: RowFilter | None) -> Any:
        return None if row_filter is None else pack_allowed(row_filter.mask)

    def prepare_all(self, row_filters: list[RowFilter | None]) -> list[Any]:
        masks = [None if f is None else f.mask for f in row_filters]
        shared = len(masks) > 1 and masks[0] is not None and all(m is masks[0] for m in masks)
        if not (self.compile_shared and shared):
            return super().prepare_all(row_filters)
        if self._last[0] is not masks[0]:
            t = time.perf_counter()
            compiled = self.idx.compile_filter(masks[0], num_threads=1)
            ms = (time.perf_counter() - t) * 1e3
            share = f"{compiled.count / len(masks[0]):.2%}"
            self.compiled[share] = (f"{ms:.1f} ms, {compiled.memory_bytes / 2**20:.1f} MB"
                                    + ("" if compiled.linked else ", no links"))
            self._last = (masks[0], compiled)
        return [self._last[1]] * len(masks)

    def one(self, q: np.ndarray, ef: int, allowed: Any) -> np.ndarray:
        return self.idx.search(q, K, ef=ef, allowed=allowed)[0][0]


class Hnswlib(Lib):
    name = "hnswlib (callable)"

    def __init__(self, x: np.ndarray, M: int, efc: int, threads: int) -> None:
        import hnswlib

        self.idx = hnswlib.Index("ip", x.shape[1])
        self.idx.init_index(len(x), M=M, ef_construction=efc)
        self.idx.add_items(x, np.arange(len(x)), num_threads=threads)

    def prepare(self, row_filter: RowFilter | None) -> Any:
        if row_filter is None:
            return None
        keep = row_filter.mask.tolist()
        return keep.__getitem__  # a list's item: the cheapest Python callable on an id

    def one(self, q: np.ndarray, ef: int, allowed: Any) -> np.ndarray:
        self.idx.set_ef(ef)
        try:
            return self.idx.knn_query(q, K, num_threads=1, filter=allowed)[0][0].astype(np.int64)
        except RuntimeError:  # fewer than k found: hnswlib raises
            return np.full(K, -1, np.int64)


class Faiss(Lib):
    """faiss HNSW over float32 rows (``IndexHNSWFlat``) or, ``sq8``, over 8-bit scalar-quantized ones
    (``IndexHNSWSQ`` QT_8bit, trained on the rows: the peer of medretrieve's int8 index)."""

    def __init__(self, x: np.ndarray, M: int, efc: int, threads: int, sq8: bool = False) -> None:
        import faiss

        self.faiss = faiss
        self.name = f"faiss {'HNSWSQ8' if sq8 else 'HNSWFlat'} (IDSelectorBitmap)"
        faiss.omp_set_num_threads(threads)
        if sq8:
            self.idx = faiss.IndexHNSWSQ(x.shape[1], faiss.ScalarQuantizer.QT_8bit, M, faiss.METRIC_INNER_PRODUCT)
            self.idx.train(x)
        else:
            self.idx = faiss.IndexHNSWFlat(x.shape[1], M, faiss.METRIC_INNER_PRODUCT)
        self.idx.hnsw.efConstruction = efc
        self.idx.add(x)
        faiss.omp_set_num_threads(1)

    def prepare(self, row_filter: RowFilter | None) -> Any:
        if row_filter is None:
            return None
        bitmap = np.packbits(row_filter.mask, bitorder="little")
        return bitmap, self.faiss.IDSelectorBitmap(len(row_filter.mask), self.faiss.swig_ptr(bitmap))

    def one(self, q: np.ndarray, ef: int, allowed: Any) -> np.ndarray:
        params = self.faiss.SearchParametersHNSW(efSearch=ef)
        if allowed is not None:
            params.sel = allowed[1]
        return self.idx.search(q[None, :], K, params=params)[1][0]


def _padded(ids: list[int]) -> np.ndarray:
    """Ids found, padded with -1 to K (fewer than K allowed rows, or a walk that found fewer)."""
    out = np.full(K, -1, np.int64)
    out[: len(ids)] = ids[:K]
    return out


class LanceDB(Lib):
    """A LanceDB table (id, vector, rank, cluster, slot) with one ``IVF_HNSW_FLAT`` index: one partition, so one
    HNSW graph over every row as the others build, searched with ``nprobes`` 1 and the filter as a prefilter."""

    def __init__(self, x: np.ndarray, fields: RowFields, M: int, efc: int) -> None:
        os.environ.setdefault("LANCE_CPU_THREADS", "1")  # read when its runtime starts: one thread, as the others
        import lancedb
        import pyarrow as pa
        from lancedb.index import IvfHnswFlat

        self.name = f"LanceDB {lancedb.__version__} IVF_HNSW_FLAT (prefilter)"
        self.dir = tempfile.mkdtemp(prefix="filtered_lancedb_")
        vectors = pa.FixedSizeListArray.from_arrays(pa.array(x.reshape(-1)), x.shape[1])
        rows = pa.table({"id": np.arange(len(x)), "vector": vectors, "rank": fields.rank, "cluster": fields.cluster,
                         "slot": fields.slot})
        self.table = lancedb.connect(self.dir).create_table("rows", rows)
        self.table.create_index("vector", config=IvfHnswFlat(distance_type="dot", num_partitions=1, m=M,
                                                             ef_construction=efc))

    def prepare(self, row_filter: RowFilter | None) -> Any:
        return None if row_filter is None else row_filter.sql()

    def one(self, q: np.ndarray, ef: int, allowed: Any) -> np.ndarray:
        query = self.table.search(q).distance_type("dot").nprobes(1).ef(ef).limit(K).select(["id", "_distance"])
        if allowed is not None:
            query = query.where(allowed, prefilter=True)
        return _padded(query.to_arrow()["id"].to_pylist())

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


class Chroma(Lib):
    """A Chroma collection (embedded ``PersistentClient``), ``ip`` space, the rows' fields as metadata; its ef is
    ``hnsw.ef_search``, changed with ``modify`` between sweeps."""

    def __init__(self, x: np.ndarray, fields: RowFields, M: int, efc: int, threads: int) -> None:
        import chromadb
        from chromadb.config import Settings

        self.name = f"Chroma {chromadb.__version__} HNSW (where)"
        self.dir = tempfile.mkdtemp(prefix="filtered_chroma_")
        self.settings = Settings(anonymized_telemetry=False)
        self.client = chromadb.PersistentClient(path=self.dir, settings=self.settings)
        self.rows = self.client.create_collection("rows", embedding_function=None, configuration={"hnsw": {
            "space": "ip", "max_neighbors": M, "ef_construction": efc, "num_threads": threads}})
        step = self.client.get_max_batch_size()
        for s in range(0, len(x), step):
            e = min(s + step, len(x))
            self.rows.add(ids=[str(i) for i in range(s, e)], embeddings=x[s:e], metadatas=[
                {"rank": int(r), "cluster": int(c), "slot": int(o)}
                for r, c, o in zip(fields.rank[s:e], fields.cluster[s:e], fields.slot[s:e])])
        self.ef = 0

    def prepare(self, row_filter: RowFilter | None) -> Any:
        return None if row_filter is None else row_filter.where()

    def one(self, q: np.ndarray, ef: int, allowed: Any) -> np.ndarray:
        if ef != self.ef:
            self.set_ef(ef)
        found = self.rows.query(query_embeddings=q[None, :], n_results=K, where=allowed, include=[])
        return _padded([int(i) for i in found["ids"][0]])

    def set_ef(self, ef: int) -> None:
        """Store ef_search (and one query thread) in the collection's configuration, then open it again: the HNSW
        segment a client has loaded keeps the ef it was loaded with (``modify`` alone changes no recall). The old
        client is collected before the new one loads: its objects hold one another in cycles, and each reopen left a
        copy of the index behind (0.33 GB at 100k x 768; at 1M the sweep ran out of memory)."""
        import chromadb
        from chromadb.api.client import SharedSystemClient

        self.rows.modify(configuration={"hnsw": {"ef_search": ef, "num_threads": 1}})
        del self.rows, self.client
        SharedSystemClient.clear_system_cache()
        gc.collect()
        self.client = chromadb.PersistentClient(path=self.dir, settings=self.settings)
        self.rows = self.client.get_collection("rows")
        self.ef = ef

    def close(self) -> None:
        shutil.rmtree(self.dir, ignore_errors=True)


def cluster_of(x: np.ndarray, clusters: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(cluster id per row, centres): nearest of ``clusters`` rows drawn as centres (one assignment pass)."""
    centres = x[np.random.default_rng(seed).choice(len(x), clusters, replace=False)]
    owner = np.empty(len(x), np.int32)
    for s in range(0, len(x), 20_000):
        owner[s:s + 20_000] = np.argmax(x[s:s + 20_000] @ centres.T, axis=1)
    return owner, centres


def row_fields(owner: np.ndarray, seed: int = 0) -> RowFields:
    """Each row's ``rank`` (a seeded random permutation), ``cluster`` (``owner``) and ``slot`` in its cluster."""
    order = np.argsort(owner, kind="stable")  # rows grouped by cluster, in row order within each
    starts = np.searchsorted(owner[order], owner[order])  # where each row's cluster begins in that order
    slot = np.empty(len(owner), np.int64)
    slot[order] = np.arange(len(owner)) - starts
    return RowFields(np.random.default_rng(seed).permutation(len(owner)), owner.astype(np.int64), slot)


def filters(q: np.ndarray, share: float, kind: str, fields: RowFields, centres: np.ndarray) -> Iterator[RowFilter]:
    """One filter per query: the same random one, or the far clusters of each query (correlated)."""
    n = len(fields.rank)
    want = max(1, round(share * n))
    if kind == "random":
        mask = fields.rank < want
        for _ in q:
            yield RowFilter(mask, rank_below=want)
        return
    sizes = np.bincount(fields.cluster, minlength=len(centres))
    for query in q:
        whole: list[int] = []
        partial = None
        taken = 0
        for c in np.argsort(centres @ query).tolist():  # farthest clusters first
            if taken + sizes[c] > want:
                partial = (c, want - taken)
                break
            whole.append(c)
            taken += int(sizes[c])
            if taken == want:
                break
        mask = np.isin(fields.cluster, whole)
        if partial is not None:
            mask |= (fields.cluster == partial[0]) & (fields.slot < partial[1])
        yield RowFilter(mask, clusters=tuple(whole), partial=partial)


def exact_filtered(x: np.ndarray, query: np.ndarray, mask: np.ndarray) -> np.ndarray:
    rows = np.flatnonzero(mask)
    # A wide filter's rows as a copy would take most of x's memory again (3 GB at 1M x 768): every row's score instead.
    sims = (x @ query)[rows] if len(rows) * 8 > len(x) else x[rows] @ query
    top = np.argsort(-sims, kind="stable")[:K]
    return rows[top]


def answer_depth(sims: np.ndarray, truths: list[np.ndarray]) -> str:
    """Where a cell's answers lie: the place of each query's last (K-th) true answer among all rows, unfiltered,
    closest first ('median / max' over the queries; K when the filter keeps the nearest rows). ``sims``: each
    query's similarity to every row (``q @ x.T``). A walk that starts beside the query scores at least that many
    elements before it can return the answer."""
    depth = [int(np.count_nonzero(row > row[truth[-1]])) + 1 for row, truth in zip(sims, truths)]
    return f"{np.median(depth):,.0f} / {max(depth):,}"


def recall_at(lib: Lib, q: np.ndarray, prepared: list[Any], truths: list[np.ndarray], ef: int) -> float:
    """Recall@K of one library's searches at this ef (the filters in its form: ``prepared``)."""
    hits = want = 0
    for query, allowed, truth in zip(q, prepared, truths):
        hits += len(set(lib.one(query, ef, allowed).tolist()) & set(truth.tolist()))
        want += len(truth)
    return hits / max(want, 1)


@dataclass(frozen=True)
class Sweep:
    """Where a library's ef sweep of one cell stopped: ``ef`` the cheapest reaching TARGET (None: none did),
    ``recall`` there (or the best seen), ``last`` the highest ef tried."""

    ef: int | None
    recall: float
    last: int


def sweep(lib: Lib, q: np.ndarray, prepared: list[Any], truths: list[np.ndarray], efs: list[int],
          budget_s: float) -> Sweep:
    """The cheapest ef whose recall reaches TARGET, ``efs`` lowest first, until ``budget_s`` seconds are spent."""
    best = 0.0
    start = time.monotonic()
    for ef in efs:
        r = recall_at(lib, q, prepared, truths, ef)
        if r >= TARGET:
            return Sweep(ef, r, ef)
        best = max(best, r)
        if time.monotonic() - start > budget_s:
            break
    return Sweep(None, best, ef)


def one_pass(lib: Lib, q: np.ndarray, prepared: list[Any], ef: int) -> np.ndarray:
    """Seconds of each query's search, one after the other."""
    times = np.empty(len(q))
    clock = time.perf_counter
    for i, query in enumerate(q):
        t = clock()
        lib.one(query, ef, prepared[i])
        times[i] = clock() - t
    return times


def time_together(runs: list[tuple[Lib, list[Any], int]], q: np.ndarray) -> list[np.ndarray]:
    """Each (library, its filters, ef)'s seconds per query, its best of ROUNDS rounds. A round runs every library's
    queries in turn (each library's once untimed, then timed), the order rotated from round to round: a box whose
    speed drifts over minutes (shared, or throttled) moves each library of a row alike, and their ratio holds. A
    library whose pass takes SLOW_ROUND_S or more runs one pass, its only round."""
    times = [np.full(len(q), np.inf) for _ in runs]
    slow = [False] * len(runs)
    for round_ in range(ROUNDS):
        for j in np.roll(np.arange(len(runs)), -round_).tolist():
            if slow[j]:
                continue
            lib, prepared, ef = runs[j]
            # The round's queries once untimed first: the other libraries' rounds evicted this one's index from the
            # caches (with 5 queries of warm-up, every library ran 5-25% slower than alone in the process). A pass
            # of seconds is a round itself: its queries take milliseconds, for which the caches matter little.
            warm = one_pass(lib, q, prepared, ef)
            slow[j] = warm.sum() > SLOW_ROUND_S
            times[j] = np.minimum(times[j], warm if slow[j] else one_pass(lib, q, prepared, ef))
    return times


def cells(libs: list[Lib], q: np.ndarray, row_filters: list[RowFilter | None], truths: list[np.ndarray],
          efs: list[int], budget_s: float) -> list[str]:
    """One row of the table: per library, the cheapest ef reaching TARGET, timed beside the others' (time_together):
    'QPS (recall, ef, p50/p99 ms)', or '-' with the best recall seen and the highest ef tried (below the last of
    ``efs`` when the budget ran out)."""
    prepared = [lib.prepare_all(row_filters) for lib in libs]
    found = [sweep(lib, q, p, truths, efs, budget_s) for lib, p in zip(libs, prepared)]
    reached = [j for j, s in enumerate(found) if s.ef is not None]
    times = dict(zip(reached, time_together([(libs[j], prepared[j], found[j].ef) for j in reached], q)))
    row = []
    for j, s in enumerate(found):
        if s.ef is None:
            row.append(f"- (best {s.recall:.3f} to ef {s.last})")
            continue
        t = times[j]
        row.append(f"{len(q) / t.sum():,.0f} ({s.recall:.3f}, ef {s.ef}, "
                   f"{np.percentile(t, 50) * 1e3:.2f}/{np.percentile(t, 99) * 1e3:.2f})")
    return row


# --libs name -> (the module it needs, for a clear error before anything is built)
NEEDS = {"medretrieve": "medretrieve", "medretrieve-int8": "medretrieve", "hnswlib": "hnswlib", "faiss": "faiss",
         "faiss-sq8": "faiss", "lancedb": "lancedb", "chroma": "chromadb"}


def chosen_libs(spec: str) -> list[str]:
    """The --libs names, each known and importable, else SystemExit naming the missing one and how to install it."""
    names = [name.strip() for name in spec.split(",") if name.strip()]
    for name in names:
        if name not in NEEDS:
            raise SystemExit(f"--libs: unknown library {name!r} (choose from {', '.join(NEEDS)})")
        if importlib.util.find_spec(NEEDS[name]) is None:
            raise SystemExit(f"--libs {name}: the module {NEEDS[name]!r} is not installed "
                             "(pip install -e '.[bench]' installs every peer)")
    return names


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=384, help="the embedding-like shape's dimension")
    ap.add_argument("--shape", default="embedding-like", choices=["embedding-like", *datagen.SHAPES, *datagen.REAL_SHAPES],
                    help="embedding-like (datagen's defaults at --dim), or a named shape of bench/datagen.py: "
                         "default-bioasq (the embedded encoder's vectors of the BioASQ passages, 384-d, at most "
                         "112,511) and minilm-bioasq are the real ones")
    ap.add_argument("--nq", type=int, default=100)
    ap.add_argument("--M", type=int, default=16)
    ap.add_argument("--efc", type=int, default=100)
    ap.add_argument("--threads", type=int, default=2, help="build threads")
    ap.add_argument("--efs", default="10,12,16,20,24,32,40,48,56,64,80,96,128,192,256,512",
                    help="the ef (LanceDB, Chroma: their ef) each library sweeps, lowest first; 10 is k")
    ap.add_argument("--shares", default=",".join(str(s) for s in SHARES))
    ap.add_argument("--libs", default="medretrieve,hnswlib,faiss",
                    help=f"comma-separated, from: {', '.join(NEEDS)}")
    ap.add_argument("--budget", type=float, default=60.0, help="seconds per cell before giving up on higher ef")
    ap.add_argument("--bitsets-only", action="store_true",
                    help="medretrieve: pass every filter as a bitset (no Index.compile_filter for shared ones)")
    a = ap.parse_args()
    names = chosen_libs(a.libs)
    efs = [int(e) for e in a.efs.split(",")]
    if a.shape == "embedding-like":
        x, q, _ = datagen.load(datagen.DataSpec(a.n, a.nq, dim=a.dim), k=K)
        described = f"{a.n} x {a.dim} embedding-like (datagen), {a.nq} queries"
    else:
        x, q, _, described = datagen.load_shape(a.shape, a.n, a.nq, k=K)
    owner, centres = cluster_of(x, max(16, len(x) // 500))
    fields = row_fields(owner)
    makers: dict[str, Callable[[], Lib]] = {
        "medretrieve": lambda: Medretrieve(x, a.M, a.efc, a.threads, "float32", not a.bitsets_only),
        "medretrieve-int8": lambda: Medretrieve(x, a.M, a.efc, a.threads, "int8", not a.bitsets_only),
        "hnswlib": lambda: Hnswlib(x, a.M, a.efc, a.threads),
        "faiss": lambda: Faiss(x, a.M, a.efc, a.threads),
        "faiss-sq8": lambda: Faiss(x, a.M, a.efc, a.threads, sq8=True),
        "lancedb": lambda: LanceDB(x, fields, a.M, a.efc),
        "chroma": lambda: Chroma(x, fields, a.M, a.efc, a.threads),
    }
    libs: list[Lib] = []
    try:
        for name in names:
            t = time.perf_counter()
            libs.append(makers[name]())
            print(f"built {libs[-1].name} in {time.perf_counter() - t:.1f} s", flush=True)
        table(libs, x, q, fields, centres, efs, [float(s) for s in a.shares.split(",")], a, described)
    finally:
        for lib in libs:
            lib.close()


def table(libs: list[Lib], x: np.ndarray, q: np.ndarray, fields: RowFields, centres: np.ndarray, efs: list[int],
          shares: list[float], a: argparse.Namespace, described: str) -> None:
    """Print the Markdown table (the data ``described`` first): a row per filter, a cell per library."""
    simd = medretrieve.Index("ip", 4)
    simd.init_index(1)
    print(f"\n{described}, M={a.M} efc={a.efc}, recall@{K} target "
          f"{TARGET}, SIMD {simd.stats().simd_level}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n")
    cols = [lib.name for lib in libs]
    print("| filter | " + " | ".join(cols) + f" | {K}th answer's unfiltered rank |")
    print("|---|" + "---|" * (len(cols) + 1))
    everything: list[RowFilter | None] = [None] * len(q)
    sims = q @ x.T  # for answer_depth: nq x n
    truths = [exact_filtered(x, query, np.ones(len(x), bool)) for query in q]
    row = cells(libs, q, everything, truths, efs, a.budget)
    print("| none | " + " | ".join(row) + f" | {answer_depth(sims, truths)} |", flush=True)
    for share in shares:
        for kind in ("random", "correlated"):
            row_filters: list[RowFilter | None] = list(filters(q, share, kind, fields, centres))
            truths = [exact_filtered(x, query, f.mask) for query, f in zip(q, row_filters) if f is not None]
            row = cells(libs, q, row_filters, truths, efs, a.budget)
            print(f"| {share:.2%} {kind} | " + " | ".join(row) + f" | {answer_depth(sims, truths)} |", flush=True)
    for lib in libs:
        if isinstance(lib, Medretrieve) and lib.compiled:
            print(f"\n{lib.name}: each random filter compiled once (Index.compile_filter, one thread, untimed as the "
                  "bitsets): " + "; ".join(f"{share} {note}" for share, note in lib.compiled.items()))


if __name__ == "__main__":
    main()
