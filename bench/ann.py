"""ANN benchmark: medretrieve (float32, int8, int8 + float re-score) against hnswlib, faiss and usearch.

One run, same data, same M and ef_construction for every library. Reports per library and efSearch: recall@10,
single-query latency p50/p99 (1 thread, one query per call), single-thread QPS, 2-thread batch QPS; per library:
build time (2 threads), bytes per vector from the saved file and from the process's resident-memory growth; and
label-filtered recall / QPS when 10%, 5% and 2.5% of the elements are allowed.

    nice python bench/ann.py --n 20000 --nq 1000 --efc 100
    nice python bench/ann.py --n 200000 --nq 1000 --efc 100          # the issue's size (slow on 2 cores)
    nice python bench/ann.py --shape minilm-bioasq --n 100000        # real MiniLM vectors of the BioASQ snippets
    MEDRETRIEVE_SIMD=avx2 nice python bench/ann.py --shape default-bioasq --n 21000 --nq 840 \
        --libs "medretrieve int8,faiss HNSWSQ8,hnswlib float32" --deep-efs ""   # the embedded encoder's vectors, AVX2
    nice python bench/ann.py --n 200000 --interleaved --libs "hnswlib float32,medretrieve int8,..."  # fair QPS
    nice python bench/ann.py --shape all --n 100000 --efs 16,32,64,128,256,512   # issue 19: every data shape
    nice python bench/ann.py --shape all --n 100000 --libs "medretrieve float32,faiss HNSWFlat"  # the graphs alone
    nice python bench/ann.py --shape all --n 100000 --libs none --int8-ceiling   # exact search over the int8 codes
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import datagen  # noqa: E402
from datagen import recall_at as recall  # noqa: E402

import medretrieve  # noqa: E402

K = 10


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


class Lib:
    """Uniform wrapper: build(x, threads), set_ef(ef), one(q) -> ids, batch(Q, threads) -> ids, save(path)."""

    name = ""

    def build(self, x: np.ndarray, threads: int) -> None: ...
    def set_ef(self, ef: int) -> None: ...
    def one(self, q: np.ndarray) -> Any: ...
    def batch(self, q: np.ndarray, threads: int) -> np.ndarray: ...
    def save(self, path: str) -> None: ...


class Medretrieve(Lib):
    def __init__(self, dtype: str, keep_float: bool, M: int, efc: int, entry_beam: int = 0,
                 prune_alpha: float | None = None) -> None:
        """prune_alpha None: the library's default (a named alpha goes into the name, for side-by-side runs)."""
        self.name = f"medretrieve {dtype}" + (" +rescore" if keep_float else "")
        if prune_alpha is not None:
            self.name += f" alpha {prune_alpha:g}"
        self.dtype, self.keep_float, self.M, self.efc, self.entry_beam = dtype, keep_float, M, efc, entry_beam
        self.prune_alpha = prune_alpha
        self.ef = 10

    @staticmethod
    def default_alpha() -> float:
        probe = medretrieve.Index("ip", 2)
        probe.init_index(1)
        return round(probe.stats().prune_alpha, 4)

    def build(self, x, threads, labels=None):
        self.idx = medretrieve.Index("ip", x.shape[1])
        self.idx.init_index(len(x), M=self.M, ef_construction=self.efc, dtype=self.dtype, keep_float=self.keep_float,
                            prune_alpha=self.prune_alpha)
        self.idx.add(x, labels=labels, num_threads=threads)
        self.idx.entry_beam = self.entry_beam
        self.core = self.idx._core

    def set_ef(self, ef):
        self.idx.set_ef(ef)

    def one(self, q):
        return self.idx.search(q, K, num_threads=1)

    def batch(self, q, threads):
        return self.idx.search(q, K, num_threads=threads)[0]

    def save(self, path):
        self.idx.save(path)


def beam_name(entry_beam: int) -> str:
    return "auto (ef // 8)" if entry_beam == 0 else str(entry_beam)


class Hnswlib(Lib):
    name = "hnswlib float32"

    def __init__(self, M, efc):
        self.M, self.efc = M, efc

    def build(self, x, threads):
        import hnswlib

        self.idx = hnswlib.Index("ip", x.shape[1])
        self.idx.init_index(len(x), M=self.M, ef_construction=self.efc)
        self.idx.add_items(x, num_threads=threads)

    def set_ef(self, ef):
        self.idx.set_ef(ef)

    def one(self, q):
        return self.idx.knn_query(q, K, num_threads=1)

    def batch(self, q, threads):
        return self.idx.knn_query(q, K, num_threads=threads)[0]

    def save(self, path):
        self.idx.save_index(path)


class Faiss(Lib):
    def __init__(self, sq: bool, M, efc):
        self.sq, self.M, self.efc = sq, M, efc
        self.name = "faiss HNSWSQ8" if sq else "faiss HNSWFlat"

    def build(self, x, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        d = x.shape[1]
        if self.sq:
            self.idx = faiss.IndexHNSWSQ(d, faiss.ScalarQuantizer.QT_8bit, self.M, faiss.METRIC_INNER_PRODUCT)
            self.idx.train(x)
        else:
            self.idx = faiss.IndexHNSWFlat(d, self.M, faiss.METRIC_INNER_PRODUCT)
        self.idx.hnsw.efConstruction = self.efc
        self.idx.add(x)

    def set_ef(self, ef):
        self.idx.hnsw.efSearch = ef

    def one(self, q):
        return self.idx.search(q[None, :], K)

    def batch(self, q, threads):
        import faiss

        faiss.omp_set_num_threads(threads)
        out = self.idx.search(q, K)[1]
        faiss.omp_set_num_threads(1)
        return out

    def save(self, path):
        import faiss

        faiss.write_index(self.idx, path)


class Usearch(Lib):
    def __init__(self, dtype: str, M, efc):
        self.dtype, self.M, self.efc = dtype, M, efc
        self.name = f"usearch {dtype}"

    def build(self, x, threads):
        from usearch.index import Index

        self.idx = Index(ndim=x.shape[1], metric="ip", dtype=self.dtype, connectivity=self.M, expansion_add=self.efc)
        self.idx.add(np.arange(len(x)), x, threads=threads)

    def set_ef(self, ef):
        self.idx.expansion_search = ef

    def one(self, q):
        return self.idx.search(q, K, threads=1)

    def batch(self, q, threads):
        return self.idx.search(q, K, threads=threads).keys

    def save(self, path):
        self.idx.save(path)


def latency(lib: Lib, queries: np.ndarray) -> tuple[float, float, float]:
    """p50 and p99 single-query latency (ms) and single-thread QPS."""
    times = np.empty(len(queries))
    for i in range(min(20, len(queries))):  # warm-up
        lib.one(queries[i])
    clock = time.perf_counter
    for i, q in enumerate(queries):
        t = clock()
        lib.one(q)
        times[i] = clock() - t
    return float(np.percentile(times, 50) * 1e3), float(np.percentile(times, 99) * 1e3), float(len(queries) / times.sum())


def run_lib(lib: Lib, x, q, gt, efs, threads, tmp) -> tuple[list[str], dict]:
    gc.collect()
    rss0 = rss_bytes()
    t = time.perf_counter()
    lib.build(x, threads)
    build_s = time.perf_counter() - t
    rss_growth = rss_bytes() - rss0
    path = os.path.join(tmp, "index.bin")
    lib.save(path)
    file_bytes = os.path.getsize(path)
    os.remove(path)
    rows = []
    for ef in efs:
        lib.set_ef(ef)
        ids = lib.batch(q, threads)
        rec = recall(ids, gt)
        t = time.perf_counter()
        lib.batch(q, threads)
        batch_qps = len(q) / (time.perf_counter() - t)
        p50, p99, qps1 = latency(lib, q)
        rows.append((ef, rec, p50, p99, qps1, batch_qps))
    summary = {"build_s": build_s, "file_bpv": file_bytes / len(x), "rss_bpv": rss_growth / len(x), "rows": rows}
    if isinstance(lib, Medretrieve):
        summary["native_bpv"] = lib.idx.memory_bytes() / len(x)
    return rows, summary


def qps_at_recall(rows, target: float) -> tuple[float, int] | None:
    ok = [(r[4], r[0]) for r in rows if r[1] >= target]
    return max(ok) if ok else None


def interleaved(libs: list[Lib], x, q, gt, efs, threads, rounds: int = 5, tmp: str | None = None) -> dict:
    """Single-query QPS with every library's queries interleaved in small slices, so load changes on a shared
    machine hit all libraries alike (the per-library table measures each library at a different time).

    Returns {"build_s": {lib: s}, "file_bpv": {lib: bytes per vector of the saved index} (when ``tmp`` is given),
    "rows": [(ef, {lib: (recall, qps)})]}."""
    out: dict = {"build_s": {}, "file_bpv": {}, "rows": []}
    for lib in libs:
        gc.collect()
        t = time.perf_counter()
        lib.build(x, threads)
        out["build_s"][lib.name] = time.perf_counter() - t
        if tmp:
            path = os.path.join(tmp, "index.bin")
            lib.save(path)
            out["file_bpv"][lib.name] = os.path.getsize(path) / len(x)
            os.remove(path)
        print(f"  built {lib.name} in {out['build_s'][lib.name]:.1f} s", file=sys.stderr, flush=True)
    clock = time.perf_counter
    for ef in efs:
        spent = {lib.name: 0.0 for lib in libs}
        recs = {}
        for lib in libs:
            lib.set_ef(ef)
            recs[lib.name] = recall(lib.batch(q, threads), gt)
            for i in range(10):
                lib.one(q[i])
        slices = np.array_split(np.arange(len(q)), rounds * 10)
        for _ in range(rounds):
            for part in slices:
                for lib in libs:
                    t = clock()
                    for i in part:
                        lib.one(q[i])
                    spent[lib.name] += clock() - t
        n = len(q) * rounds
        out["rows"].append((ef, {lib.name: (recs[lib.name], n / spent[lib.name]) for lib in libs}))
        print(f"  ef {ef}: " + ", ".join(f"{name} {r:.4f} / {qps:.0f}" for name, (r, qps) in out["rows"][-1][1].items()),
              file=sys.stderr, flush=True)
    return out


def interleaved_table(res: dict) -> list[str]:
    names = list(res["rows"][0][1])
    out = ["| ef | " + " | ".join(f"{name} recall / QPS" for name in names) + " |", "|---|" + "---|" * len(names)]
    for ef, per in res["rows"]:
        out.append(f"| {ef} | " + " | ".join(f"{per[name][0]:.4f} / {per[name][1]:.0f}" for name in names) + " |")
    return out


OURS, OURS_RESCORE, OURS_FLOAT = "medretrieve int8", "medretrieve int8 +rescore", "medretrieve float32"
FAISS_SQ, FAISS_FLAT, HNSWLIB = "faiss HNSWSQ8", "faiss HNSWFlat", "hnswlib float32"


def best_at(res: dict, name: str, target: float) -> tuple[float, int] | None:
    """(single-query QPS, ef) at the smallest ef reaching recall >= target (what an operator would set), or None."""
    ok = [(per[name][1], ef) for ef, per in res["rows"] if name in per and per[name][0] >= target]
    return min(ok, key=lambda t: t[1]) if ok else None


def interpolated_at(res: dict, name: str, target: float) -> float | None:
    """Single-query QPS at recall == target, log-linear between the two ef steps around the first crossing: on a
    coarse ef grid the smallest-ef rule jumps a whole step when one build's recall at an ef lands just either side
    of the target (the 2-thread builds differ from run to run), so the ratio of two libraries swings with it."""
    points = [per[name] for _, per in res["rows"] if name in per]
    for i, (rec, qps) in enumerate(points):
        if rec == target:
            return qps
        if rec > target:
            if i == 0:
                return None  # the grid starts above the target: nothing to interpolate from
            r0, q0 = points[i - 1]
            share = (target - r0) / (rec - r0)
            return float(np.exp(np.log(q0) + share * (np.log(qps) - np.log(q0))))
    return None


def shape_summary(res: dict, target: float = 0.95) -> list[str]:
    """The issue-19 criteria of one shape: QPS at recall >= target and its ratios to the peers, recall per ef
    against faiss HNSWFlat, keep_float's best recall, build time and bytes per vector."""
    names = list(res["rows"][0][1])
    at = {name: best_at(res, name, target) for name in names}
    out = ["", f"| index | build s | bytes/vector (file) | QPS at recall>={target} (smallest such ef) | max recall (ef) |",
           "|---|---|---|---|---|"]
    for name in names:
        top = max((per[name][0], -ef) for ef, per in res["rows"])
        bpv = res["file_bpv"].get(name)
        qps = f"{at[name][0]:.0f} ({at[name][1]})" if at[name] else "-"
        out.append(f"| {name} | {res['build_s'][name]:.1f} | {bpv:.0f} | {qps} | {top[0]:.4f} ({-top[1]}) |"
                   if bpv is not None else f"| {name} | {res['build_s'][name]:.1f} | - | {qps} | {top[0]:.4f} ({-top[1]}) |")
    interp = {name: interpolated_at(res, name, target) for name in names}
    out.append("")
    for label, qps_of in ((f">= {target}", {name: at[name][0] for name in names if at[name]}),
                          (f"= {target}, interpolated between the ef steps around it", interp)):
        ratios = [f"{ours} / {peer} = {qps_of[ours] / qps_of[peer]:.2f}x" for ours in (OURS, OURS_RESCORE)
                  for peer in (FAISS_SQ, FAISS_FLAT, HNSWLIB) if qps_of.get(ours) and qps_of.get(peer)]
        if ratios:
            out.append(f"QPS ratios at recall {label}: " + "; ".join(ratios) + ".")
    if FAISS_FLAT in names:
        for ours in (OURS, OURS_RESCORE, OURS_FLOAT):
            if ours in names:
                diffs = [per[ours][0] - per[FAISS_FLAT][0] for _, per in res["rows"]]
                out.append(f"Recall per ef, {ours} minus {FAISS_FLAT}: " + ", ".join(f"{d:+.4f}" for d in diffs)
                           + f" (min {min(diffs):+.4f}).")
    for name, by_ef in res.get("deep", {}).items():
        out.append(f"{name} recall at larger ef (no timing; ties with the 10th counted): "
                   + ", ".join(f"ef {ef} {r:.4f} ({tied:.4f})" for ef, r, tied in by_ef) + ".")
    return out


def deep_recall(libs: list[Lib], x, q, gt, efs, threads) -> dict:
    """Recall of the medretrieve indexes at efs beyond the timed sweep (how far keep_float re-scoring goes), by id and
    with exact ties counted (``datagen.recall_with_ties``: with duplicate rows the true top 10 is one pick among equals)."""
    out = {}
    for lib in libs:
        if isinstance(lib, Medretrieve) and efs:
            out[lib.name] = []
            for ef in efs:
                lib.set_ef(ef)
                found = lib.batch(q, threads)
                out[lib.name].append((ef, recall(found, gt), datagen.recall_with_ties(found, x, q)))
    return out


def int8_ceiling(x: np.ndarray, q: np.ndarray, gt: np.ndarray, threads: int) -> float:
    """Recall@10 of exact search over the int8 codes (FlatIndex, the same quantizer and centre as Index's int8
    storage): the most any int8 graph searched without kept floats can reach, however large its ef."""
    flat = medretrieve.FlatIndex("ip", x.shape[1], dtype="int8")
    flat.train(x[:100_000])  # Index trains its centre on the first 100,000 rows of its first add, as here
    flat.add(x)
    return recall(flat.search(q, K, num_threads=threads)[0], gt)


def filtered(x, q, efs, M, efc, threads, dtypes=("int8", "float32")) -> list[str]:
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 40, len(x))  # 40 labels: one = 2.5%, two = 5%, four = 10%
    out = ["", "Label-filtered search (native labels; exact fallback when the allowed subset is small):", "",
           "| index | allowed | ef | path | recall@10 | 1-thread QPS |", "|---|---|---|---|---|---|"]
    for dtype in dtypes:
        lib = Medretrieve(dtype, False, M, efc)
        lib.build(x, threads, labels=labels)
        for allowed in ([3, 11, 19, 27], [3, 11], [3]):
            sub = np.flatnonzero(np.isin(labels, allowed))
            truth = sub[datagen.exact_knn(x[sub], q, K)]
            share = f"{len(sub) / len(x):.1%}"
            for factor, mode in ((1.0, "auto"), (0.0, "graph"), (1e12, "exact")):
                lib.core.set_filter_exact_factor(factor)
                for ef in efs:
                    path = mode
                    ids = lib.idx.search(q, K, ef=ef, labels=allowed, num_threads=1)[0]
                    best = float("inf")
                    for _ in range(3):  # best of 3: the shared box's load spikes
                        t = time.perf_counter()
                        lib.idx.search(q, K, ef=ef, labels=allowed, num_threads=1)
                        best = min(best, time.perf_counter() - t)
                    qps = len(q) / best
                    if mode == "auto":  # the native cost model's choice (hnsw.cpp)
                        exact = len(sub) <= factor * ef * len(x) / len(sub) * 0.75 * M  # Hnsw::kGraphCostPerNode
                        path = "auto: exact" if exact else "auto: graph"
                    out.append(f"| {lib.name} | {share} | {ef} | {path} | {recall(ids, truth):.4f} | {qps:.0f} |")
        del lib
        gc.collect()
    return out


# --libs all; OURS_FLOAT (the float32 graph: no quantizer on either side against HNSWFlat) only when named
SHAPE_LIBS = (OURS, OURS_RESCORE, FAISS_SQ, FAISS_FLAT, HNSWLIB)


def run_shapes(a: argparse.Namespace, efs: list[int]) -> None:
    """One interleaved run per named shape: the recall / QPS table and the issue-19 summary for each."""
    import faiss

    faiss.omp_set_num_threads(1)
    names = [*datagen.SHAPES, *datagen.REAL_SHAPES] if a.shape == "all" else a.shape.split(",")
    wanted = SHAPE_LIBS if a.libs == "all" else [w.strip() for w in a.libs.split(",")]
    for name in names:
        x, q, gt, desc = datagen.load_shape(name, a.n, a.nq)
        libs = [Medretrieve(dtype, keep, a.M, a.efc, a.entry_beam)
                for dtype, keep in (("int8", False), ("int8", True), ("float32", False))]
        libs += [Faiss(True, a.M, a.efc), Faiss(False, a.M, a.efc), Hnswlib(a.M, a.efc)]
        libs = [lib for lib in libs if lib.name in wanted]
        libs[1:1] = [Medretrieve("int8", False, a.M, a.efc, a.entry_beam, float(alpha))
                     for alpha in a.compare_alpha.split(",") if alpha]
        print(f"\n### {desc}\n\nM={a.M} ef_construction={a.efc}, builds with {a.threads} threads; single-query QPS "
              f"(1 thread), libraries interleaved ({a.rounds} passes); simd={medretrieve.simd_level()}; medretrieve "
              f"entry beam {beam_name(a.entry_beam)}, prune_alpha {Medretrieve.default_alpha()}\n", flush=True)
        if libs:  # --libs none: only the int8 ceiling
            with tempfile.TemporaryDirectory() as tmp:
                res = interleaved(libs, x, q, gt, efs, a.threads, a.rounds, tmp)
            res["deep"] = deep_recall(libs, x, q, gt, [int(e) for e in a.deep_efs.split(",") if e], a.threads)
            for line in interleaved_table(res) + shape_summary(res):
                print(line, flush=True)
        if a.int8_ceiling:
            print(f"Exact search over the int8 codes (FlatIndex int8, no graph): recall@10 "
                  f"{int8_ceiling(x, q, gt, a.threads):.4f}, the ceiling of int8 without kept floats.", flush=True)
        del libs
        gc.collect()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--nq", type=int, default=1_000)
    ap.add_argument("--M", type=int, default=16)
    ap.add_argument("--efc", type=int, default=100)
    ap.add_argument("--efs", default="10,16,24,32,48,64,96,128")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--libs", default="all", help="comma list of name prefixes, all, or (with --shape) none")
    ap.add_argument("--shape", help="comma list of named data shapes (bench/datagen.py SHAPES, minilm-bioasq, default-bioasq) or "
                    "'all': one interleaved run per shape with the issue-19 summary (implies --interleaved)")
    ap.add_argument("--entry-beam", type=int, default=0,
                    help="with --shape: medretrieve's Index.entry_beam (0, the default: ef // 8; 1: one descent)")
    ap.add_argument("--compare-alpha", default="",
                    help="with --shape: also medretrieve int8 built with these prune_alpha values (comma list)")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved timing passes over the queries per ef")
    ap.add_argument("--deep-efs", default="256,512,1024,2048",
                    help="with --shape: larger efs at which the medretrieve indexes' recall is measured (untimed)")
    ap.add_argument("--int8-ceiling", action="store_true",
                    help="with --shape: also the recall of exact search over the int8 codes (the quantizer's ceiling)")
    ap.add_argument("--no-filter", action="store_true")
    ap.add_argument("--filter-only", action="store_true", help="only the label-filtered table")
    ap.add_argument("--filter-dtypes", default="int8,float32", help="medretrieve dtypes for the filtered table")
    ap.add_argument("--interleaved", action="store_true",
                    help="build the chosen --libs in one process and time their single queries interleaved")
    ap.add_argument("--worker", help=argparse.SUPPRESS)  # internal: run one library in this process
    a = ap.parse_args()
    efs = [int(e) for e in a.efs.split(",")]
    if a.shape:
        run_shapes(a, efs)
        return
    x, q, gt = datagen.load(datagen.DataSpec(a.n, a.nq))
    data = f"embedding-like {a.n}x{x.shape[1]}, {a.nq} queries"
    libs: list[Lib] = [
        Medretrieve("float32", False, a.M, a.efc), Medretrieve("int8", False, a.M, a.efc),
        Medretrieve("int8", True, a.M, a.efc), Hnswlib(a.M, a.efc), Faiss(False, a.M, a.efc), Faiss(True, a.M, a.efc),
        Usearch("f32", a.M, a.efc), Usearch("i8", a.M, a.efc),
    ]
    if a.worker:
        # One library per process: resident-memory growth is then the index's own, not allocator leftovers.
        import faiss

        faiss.omp_set_num_threads(1)
        lib = next(lib for lib in libs if lib.name == a.worker)
        with tempfile.TemporaryDirectory() as tmp:
            _, summary = run_lib(lib, x, q, gt, efs, a.threads, tmp)
        print("RESULT " + json.dumps(summary), flush=True)
        return
    if a.libs != "all":
        wanted = [w.strip() for w in a.libs.split(",")]
        libs = [lib for lib in libs if any(lib.name == w or lib.name.startswith(w + " ") for w in wanted)]
    if a.filter_only:
        for line in filtered(x, q[:300], [32, 64, 128], a.M, a.efc, a.threads, tuple(a.filter_dtypes.split(","))):
            print(line, flush=True)
        return
    if a.interleaved:
        import faiss

        faiss.omp_set_num_threads(1)
        print(f"# {data}; M={a.M} ef_construction={a.efc}; single-query QPS, 1 thread, libraries interleaved\n")
        for line in interleaved_table(interleaved(libs, x, q, gt, efs, a.threads, a.rounds)):
            print(line, flush=True)
        return
    print(f"# {data}; M={a.M} ef_construction={a.efc}; build and batch with {a.threads} threads; "
          f"simd={medretrieve.simd_level()}\n")
    print("| index | ef | recall@10 | p50 ms | p99 ms | 1-thread QPS | 2-thread batch QPS |")
    print("|---|---|---|---|---|---|---|", flush=True)
    summaries = {}
    passthrough = [arg for arg in sys.argv[1:] if not arg.startswith("--libs")]
    for lib in libs:
        proc = subprocess.run([sys.executable, __file__, *passthrough, "--worker", lib.name, "--no-filter"],
                              capture_output=True, text=True)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode or not line:
            print(f"| {lib.name} | failed: {proc.stderr.strip().splitlines()[-1:]} |", flush=True)
            continue
        summary = json.loads(line[0][7:])
        summaries[lib.name] = summary
        for ef, rec, p50, p99, qps1, bq in summary["rows"]:
            print(f"| {lib.name} | {ef} | {rec:.4f} | {p50:.3f} | {p99:.3f} | {qps1:.0f} | {bq:.0f} |", flush=True)
    print("\n| index | build s | bytes/vector (file) | bytes/vector (RSS growth) | best 1-thread QPS at recall>=0.95 (ef) | at >=0.99 (ef) |")
    print("|---|---|---|---|---|---|")
    for name, s in summaries.items():
        at95, at99 = qps_at_recall(s["rows"], 0.95), qps_at_recall(s["rows"], 0.99)
        f95 = f"{at95[0]:.0f} ({at95[1]})" if at95 else "-"
        f99 = f"{at99[0]:.0f} ({at99[1]})" if at99 else "-"
        native = f" (native {s['native_bpv']:.0f})" if "native_bpv" in s else ""
        print(f"| {name} | {s['build_s']:.1f} | {s['file_bpv']:.0f} | {s['rss_bpv']:.0f}{native} | {f95} | {f99} |")
    if not a.no_filter:
        dtypes = tuple(d for d in a.filter_dtypes.split(",") if d)
        for line in filtered(x, q[:300], [32, 64, 128], a.M, a.efc, a.threads, dtypes):
            print(line, flush=True)


if __name__ == "__main__":
    main()
