"""Index scale: int8 HNSW at 1M and 5M vectors built out of core, opened with mmap, served one query at a time.

    python bench/scale.py data  --n 1000000               # seeded 768-d embedding-like vectors, in batches, to disk
    python bench/scale.py build --n 1000000 --M 16 --efc 200 [--lib faiss]   # one build, its own process
    python bench/scale.py serve --n 1000000 --M 16 --efc 200 [--lib faiss] [--entry-beam 32]   # a fresh process serves it
    python bench/scale.py run   --n 1000000 --M 16 --efc 200 [--lib faiss]   # build then serve (two processes)
    python bench/scale.py report                          # markdown tables of every result so far

Data (``data``): ``bench/datagen.py``'s embedding-like vectors (768 d, 256 clusters in a 48-d latent space, shared
mean offset, normalised), generated ``--batch`` rows at a time and appended to a raw float32 file
(``medretrieve.corpus.spill.VectorSpill``), so no step holds the ``n x 768`` float32 matrix (15 GB at 5M); one
label in 0..9 per vector (uniform, seeded: label 3 is the "10% filter"); ``--nq`` queries from the same
distribution; exact top-10 (unfiltered and among label-3 vectors) by float32 matrix products over the file in
batches. Everything lives under ``--work`` (default /tmp/medretrieve_scale) and is reused.

build: ``medretrieve.corpus.spill.build_index`` (the out-of-core path of a collection build: the index sized
exactly, batches read through short-lived memory maps) with ``--threads`` threads, then ``save``; or faiss
``IndexHNSWSQ`` (8-bit scalar quantizer, same M / efConstruction, SQ trained on the first 100k rows, rows added in
the same batches). Reports build seconds and vectors per second (a progress line per batch, also written to a
JSON so a build stopped early still gives its rate), peak RSS of the build and, apart, of the save
(``/proc/self/clear_refs`` resets the peak between the two), the native memory, file bytes and bytes per vector.

serve: a fresh process opens the file (medretrieve: ``Index.load(mmap=True)``; faiss: ``read_index`` with
``IO_FLAG_MMAP`` when faiss can map that index type, else a plain read), times the open and the first query
(cold pages), reads the file through once (as the page cache of a service that has been up a while holds it; at
5M the file is 4.7 GB and cold page faults would otherwise land in the first ef's percentiles), then per ef: recall@10, single-query p50 / p99 (1 thread, one query per call, after 50 warm-up
queries) without and with the 10% label filter, and the process's RSS (anonymous and file-backed) while serving.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import datagen  # noqa: E402

from medretrieve.corpus.spill import VectorSpill, build_index  # noqa: E402
from medretrieve.distributed.shard_actor import process_memory  # noqa: E402

K = 10
FILTER_LABEL = 3  # of 10 uniform labels: 10% of the vectors
EFS = (40, 64, 100, 200, 400, 800, 1600)


# ----------------------------------------------------------------- process memory


def status_kb() -> Dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile of this process (kB)."""
    return {k: v // 1024 for k, v in process_memory().items()}


def reset_peak() -> None:
    """Reset VmHWM to the current RSS (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


# ----------------------------------------------------------------- data


class Data:
    def __init__(self, work: Path, n: int, nq: int) -> None:
        self.work, self.n, self.nq = work, n, nq
        self.spec = datagen.DataSpec(n, nq)
        self.base = work / f"base-{n}.f32"
        self.queries = work / f"queries-{nq}.npy"
        self.labels = work / f"labels-{n}.npy"
        self.truth = work / f"truth-{n}-{nq}.npz"

    def spill(self) -> VectorSpill:
        return VectorSpill(self.base, self.spec.dim)

    def ready(self) -> bool:
        return self.truth.is_file() and self.base.is_file() and len(self.spill()) == self.n

    def load_truth(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        with np.load(self.truth) as z:
            return np.load(self.queries), z["gt"], z["gt_filtered"]


def make_data(d: Data, batch: int) -> None:
    d.work.mkdir(parents=True, exist_ok=True)
    if d.ready():
        print(f"data for n={d.n} ready in {d.work}", file=sys.stderr)
        return
    t0 = time.perf_counter()
    spill = d.spill()
    have = len(spill)
    if have < d.n:  # resume: regenerate from the start, appending only the rows not yet written
        done = 0
        for x in datagen.sample_batches(d.spec, d.n, 0, batch):
            if done + len(x) > have:
                spill.append(x[max(0, have - done):])
            done += len(x)
            print(f"  base rows {done}/{d.n} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    labels = np.random.default_rng(7).integers(0, 10, d.n).astype(np.int8)
    np.save(d.labels, labels)
    q = datagen.sample(d.spec, d.nq, 1)
    np.save(d.queries, q)
    best = np.full((d.nq, K), -np.inf, dtype=np.float32)
    best_ids = np.zeros((d.nq, K), dtype=np.int64)
    fbest, fbest_ids = best.copy(), best_ids.copy()
    for a, x in spill.batches(batch):
        sims = q @ x.T
        ids = np.arange(a, a + len(x))
        best, best_ids = _merge_top(best, best_ids, sims, ids)
        keep = labels[a:a + len(x)] == FILTER_LABEL
        fbest, fbest_ids = _merge_top(fbest, fbest_ids, sims[:, keep], ids[keep])
        print(f"  truth {a + len(x)}/{d.n} ({time.perf_counter() - t0:.0f} s)", file=sys.stderr, flush=True)
    tmp = d.truth.with_suffix(".tmp.npz")
    np.savez(tmp, gt=best_ids, gt_filtered=fbest_ids)
    os.replace(tmp, d.truth)
    print(f"data for n={d.n}: {time.perf_counter() - t0:.0f} s", file=sys.stderr)


def _merge_top(best, best_ids, sims, ids):
    """The running top-K per query merged with a batch's similarities."""
    if sims.shape[1] > K:
        part = np.argpartition(-sims, K - 1, axis=1)[:, :K]
        sims, cand = np.take_along_axis(sims, part, 1), ids[part]
    else:
        cand = np.broadcast_to(ids, sims.shape)
    allv = np.concatenate([best, sims], axis=1)
    alli = np.concatenate([best_ids, cand], axis=1)
    order = np.argsort(-allv, axis=1, kind="stable")[:, :K]
    return np.take_along_axis(allv, order, 1), np.take_along_axis(alli, order, 1)


# ----------------------------------------------------------------- libraries


def index_path(work: Path, lib: str, n: int, M: int, efc: int) -> Path:
    return work / f"{lib}-n{n}-M{M}-efc{efc}.index"


def result_path(work: Path, lib: str, n: int, M: int, efc: int, what: str) -> Path:
    return work / "results" / f"{lib}-n{n}-M{M}-efc{efc}-{what}.json"


def write_result(path: Path, payload: Dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(payload, indent=1))
    os.replace(tmp, path)


def build(a) -> None:
    d = Data(Path(a.work), a.n, a.nq)
    if not d.ready():
        sys.exit(f"no data for n={a.n}: run `python bench/scale.py data --n {a.n}` first")
    spill = d.spill()
    labels = np.load(d.labels, mmap_mode="r")
    out = index_path(d.work, a.lib, a.n, a.M, a.efc)
    progress_file = result_path(d.work, a.lib, a.n, a.M, a.efc, "progress")
    gc_base = status_kb()
    t0 = time.perf_counter()
    steps: List[Tuple[int, float]] = []

    def progress(done: int, total: int) -> None:
        steps.append((done, time.perf_counter() - t0))
        rate = done / steps[-1][1]
        print(f"  {a.lib} M={a.M} efc={a.efc}: {done}/{total} in {steps[-1][1]:.0f} s ({rate:.0f} vectors/s)",
              file=sys.stderr, flush=True)
        write_result(progress_file, {"steps": steps, "n": total, "threads": a.threads})

    if a.lib == "medretrieve":
        index = build_index(spill, "int8", a.M, a.efc, labels=labels, num_threads=a.threads, batch=a.batch,
                            progress=progress)
        native = index.memory_bytes()
    else:
        index = _faiss_build(spill, a, progress)
        native = None
    build_s = time.perf_counter() - t0
    build_peak = status_kb()
    reset_peak()
    t1 = time.perf_counter()
    if a.lib == "medretrieve":
        index.save(str(out), snapshot=False)  # streamed: no second copy of the index in memory
    else:
        import faiss

        faiss.write_index(index, str(out))
    save_s = time.perf_counter() - t1
    save_peak = status_kb()
    size = out.stat().st_size
    payload = {"lib": a.lib, "n": a.n, "M": a.M, "efc": a.efc, "threads": a.threads, "build_s": build_s,
               "vectors_per_s": a.n / build_s, "save_s": save_s, "file_bytes": size, "bytes_per_vector": size / a.n,
               "native_bytes": native, "rss_before_kb": gc_base["VmRSS"], "build_peak_kb": build_peak["VmHWM"],
               "save_peak_kb": save_peak["VmHWM"], "batch": a.batch, "steps": steps,
               "load_avg": os.getloadavg()}
    write_result(result_path(d.work, a.lib, a.n, a.M, a.efc, "build"), payload)
    print(json.dumps({k: v for k, v in payload.items() if k != "steps"}))


def _faiss_build(spill: VectorSpill, a, progress):
    import faiss

    faiss.omp_set_num_threads(a.threads)
    idx = faiss.IndexHNSWSQ(spill.dim, faiss.ScalarQuantizer.QT_8bit, a.M, faiss.METRIC_INNER_PRODUCT)
    idx.hnsw.efConstruction = a.efc
    idx.train(spill.read(0, min(100_000, len(spill))))
    for start, rows in spill.batches(a.batch):
        idx.add(rows)
        progress(start + len(rows), len(spill))
    return idx


class Searcher:
    """One query at a time against a medretrieve or faiss index, optionally restricted to one label."""

    def __init__(self, lib: str, path: Path, labels: np.ndarray, entry_beam: int = 0) -> None:
        self.lib = lib
        if lib == "medretrieve":
            from medretrieve.index import Index

            self.index = Index.load(path, mmap=True)
            self.index.entry_beam = entry_beam
            self.mapped = True
        else:
            import faiss

            faiss.omp_set_num_threads(1)
            try:
                self.index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP)
                self.mapped = True
            except RuntimeError:
                self.index = faiss.read_index(str(path))
                self.mapped = False
            self._bitmap = np.packbits(labels == FILTER_LABEL, bitorder="little")
            self._selector = faiss.IDSelectorBitmap(len(labels), faiss.swig_ptr(self._bitmap))

    def one(self, q: np.ndarray, ef: int, filtered: bool) -> np.ndarray:
        if self.lib == "medretrieve":
            return self.index.search(q[None, :], K, ef=ef, labels=[FILTER_LABEL] if filtered else None,
                                     num_threads=1)[0][0]
        import faiss

        params = faiss.SearchParametersHNSW(efSearch=ef, sel=self._selector if filtered else None)
        return self.index.search(q[None, :], K, params=params)[1][0]


def serve(a) -> None:
    d = Data(Path(a.work), a.n, a.nq)
    queries, gt, gt_f = d.load_truth()
    labels = np.load(d.labels)
    path = index_path(d.work, a.lib, a.n, a.M, a.efc)
    before = status_kb()
    t0 = time.perf_counter()
    if a.entry_beam != 0 and a.lib != "medretrieve":
        sys.exit("--entry-beam is a medretrieve search setting")
    s = Searcher(a.lib, path, labels, a.entry_beam)
    open_s = time.perf_counter() - t0
    after_open = status_kb()
    t0 = time.perf_counter()
    s.one(queries[0], EFS[0], False)
    first_ms = (time.perf_counter() - t0) * 1e3
    page_in_s = read_through(path)  # a service up for a while has its index in the page cache
    for i in range(50):
        s.one(queries[i], EFS[-1], False)
    rows = []
    clock = time.perf_counter
    for filtered in (False, True):
        truth = gt_f if filtered else gt
        nq = len(queries) if not filtered else min(len(queries), a.filter_queries)
        for ef in EFS:
            times = np.empty(nq)
            hits = 0
            for i in range(nq):
                t = clock()
                found = s.one(queries[i], ef, filtered)
                times[i] = clock() - t
                hits += len(set(found.tolist()) & set(truth[i].tolist()))
            rows.append({"filtered": filtered, "ef": ef, "recall": hits / (nq * K),
                         "p50_ms": float(np.percentile(times, 50) * 1e3),
                         "p99_ms": float(np.percentile(times, 99) * 1e3), "queries": nq})
            r = rows[-1]
            print(f"  {a.lib} n={a.n} M={a.M} beam={a.entry_beam} filtered={filtered} ef={ef}: recall {r['recall']:.4f} "
                  f"p50 {r['p50_ms']:.3f} p99 {r['p99_ms']:.3f} ms", file=sys.stderr, flush=True)
    serving = status_kb()
    payload = {"lib": a.lib, "n": a.n, "M": a.M, "efc": a.efc, "entry_beam": a.entry_beam, "open_s": open_s,
               "first_query_ms": first_ms, "page_in_s": page_in_s, "mapped": s.mapped, "rss_before_kb": before, "rss_after_open_kb": after_open,
               "rss_serving_kb": serving, "rows": rows, "load_avg": os.getloadavg()}
    what = "serve" if a.entry_beam == 0 else f"serve-beam{a.entry_beam}"
    write_result(result_path(d.work, a.lib, a.n, a.M, a.efc, what), payload)
    print(json.dumps({k: v for k, v in payload.items() if k != "rows"}))


def read_through(path: Path, block: int = 16 << 20) -> float:
    """Read a file once from start to end (into the page cache); seconds taken."""
    t0 = time.perf_counter()
    with open(path, "rb", buffering=0) as fh:
        while fh.read(block):
            pass
    return time.perf_counter() - t0


def run(a) -> None:
    common = ["--n", str(a.n), "--nq", str(a.nq), "--M", str(a.M), "--efc", str(a.efc), "--lib", a.lib,
              "--work", a.work, "--threads", str(a.threads), "--batch", str(a.batch),
              "--filter-queries", str(a.filter_queries), "--entry-beam", str(a.entry_beam)]
    for what in ("build", "serve"):
        subprocess.run([sys.executable, __file__, what, *common], check=True)


# ----------------------------------------------------------------- report


def report(a) -> None:
    results = Path(a.work) / "results"
    builds = {p.name[:-len("-build.json")]: json.loads(p.read_text()) for p in sorted(results.glob("*-build.json"))}
    serves = {p.name[:-len("-serve.json")]: json.loads(p.read_text()) for p in sorted(results.glob("*-serve.json"))}
    beams = [json.loads(p.read_text()) for p in sorted(results.glob("*-serve-beam*.json"))]
    partial = {p.name[:-len("-progress.json")]: json.loads(p.read_text())
               for p in sorted(results.glob("*-progress.json"))}
    print("| index | n | M / efc | build s (2 threads) | vectors/s | peak RSS build / save (GiB) | file GiB | "
          "bytes/vector | open s | first query ms | RSS serving GiB (anon + file) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for key, b in builds.items():
        s = serves.get(key)
        rss = s["rss_serving_kb"] if s else None
        serving = (f"{rss['VmRSS'] / 2**20:.2f} ({rss['RssAnon'] / 2**20:.2f} + {rss['RssFile'] / 2**20:.2f})"
                   if rss else "-")
        print(f"| {b['lib']} int8 | {b['n']:,} | {b['M']} / {b['efc']} | {b['build_s']:.0f} | "
              f"{b['vectors_per_s']:.0f} | {b['build_peak_kb'] / 2**20:.2f} / {b['save_peak_kb'] / 2**20:.2f} | "
              f"{b['file_bytes'] / 2**30:.2f} | {b['bytes_per_vector']:.0f} | "
              f"{s['open_s']:.2f} | {s['first_query_ms']:.1f} | {serving} |" if s else
              f"| {b['lib']} int8 | {b['n']:,} | {b['M']} / {b['efc']} | {b['build_s']:.0f} | "
              f"{b['vectors_per_s']:.0f} | {b['build_peak_kb'] / 2**20:.2f} / {b['save_peak_kb'] / 2**20:.2f} | "
              f"{b['file_bytes'] / 2**30:.2f} | {b['bytes_per_vector']:.0f} | - | - | - |")
    unfinished = {k: p for k, p in partial.items() if k not in builds and p["steps"]}
    if unfinished:
        print("\nBuilds stopped before the end (rate from their progress):\n")
        print("| index | vectors added | seconds | vectors/s | projected build s for n |")
        print("|---|---|---|---|---|")
        for key, p in unfinished.items():
            done, sec = p["steps"][-1]
            print(f"| {key} | {done:,} | {sec:.0f} | {done / sec:.0f} | {p['n'] / (done / sec):.0f} |")
    print("\n| index | n | M / efc | entry beam | filter | ef | recall@10 | p50 ms | p99 ms |")
    print("|---|---|---|---|---|---|---|---|---|")
    for s in [*serves.values(), *beams]:
        for r in s["rows"]:
            print(f"| {s['lib']} int8 | {s['n']:,} | {s['M']} / {s['efc']} | {s.get('entry_beam', 1) or 'ef // 8'} | "
                  f"{'10%' if r['filtered'] else 'none'} | {r['ef']} | {r['recall']:.4f} | {r['p50_ms']:.3f} | "
                  f"{r['p99_ms']:.3f} |")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("what", choices=("data", "build", "serve", "run", "report"))
    p.add_argument("--n", type=int, default=1_000_000)
    p.add_argument("--nq", type=int, default=1000)
    p.add_argument("--M", type=int, default=16)
    p.add_argument("--efc", type=int, default=200)
    p.add_argument("--lib", choices=("medretrieve", "faiss"), default="medretrieve")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--batch", type=int, default=50_000)
    p.add_argument("--filter-queries", type=int, default=500)
    p.add_argument("--entry-beam", type=int, default=0,
                   help="serve: medretrieve's layer-1 entry beam (0, the default: ef // 8; 1: one greedy descent)")
    p.add_argument("--work", default="/tmp/medretrieve_scale")
    a = p.parse_args()
    if a.what == "data":
        make_data(Data(Path(a.work), a.n, a.nq), a.batch)
    else:
        {"build": build, "serve": serve, "run": run, "report": report}[a.what](a)


if __name__ == "__main__":
    main()
