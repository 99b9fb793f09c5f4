"""Searches from 8 threads while ``Collection.add`` / ``delete`` run: errors, and the search p99 with updates
against without, in one run.

    python bench/probes/live_updates.py [--searches 100000] [--quiet 20000] [--threads 8] [--rounds 10]
                                 [--collection DIR] [--work DIR] [--full] [--out results.json]

The collection is a copy of ``--collection`` (default: the demo corpus, built once into ``--work``). ``--threads``
threads call ``Retriever.search`` in a loop over ``examples/demo_questions.json`` (first stages + fusion + prune;
``--full`` adds expansion, the learned ranker and recovery). The run alternates ``--rounds`` windows of each kind,
so both see the same machine load: a quiet window (no writer) of ``quiet / rounds`` searches, then an update window
of ``searches / rounds`` searches while one writer thread adds two documents and deletes one, again and again
(each a complete, written update). A search belongs to the window it started in. Every failure is counted by
type; at the end the collection on disk is reopened and checked against the one in memory.

Prints one table (searches, errors, p50 / p90 / p99 / max in ms, updates done and their mean time) and the p99
ratio of update windows to quiet ones; ``--out`` writes the same as JSON.
"""
from __future__ import annotations

import argparse
import collections
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List

import numpy as np

ROOT = Path(__file__).resolve().parents[2]


def _doc(i: int) -> dict:
    return {"id": f"live-{i}", "title": f"Live update {i}",
            "sections": [{"title": "Treatment", "text": f"Drug number {i} treats gout flares and migraine; the "
                                                         f"dose is {i} mg twice a day."},
                         {"title": "Symptoms", "text": f"Patients with condition {i} report thirst, wheezing "
                                                        "and a rash."}]}


class Writer(threading.Thread):
    """Adds two documents and deletes one, over and over, while ``active`` is set; ``stop`` ends it."""

    def __init__(self, col) -> None:
        super().__init__(daemon=True)
        self.col = col
        self.active = threading.Event()
        self.stop = threading.Event()
        self.idle = threading.Event()
        self.seconds: List[float] = []
        self.errors: List[str] = []
        self.next = 0

    def run(self) -> None:
        while not self.stop.is_set():
            if not self.active.is_set():
                self.idle.set()
                self.active.wait(0.05)
                continue
            self.idle.clear()
            i = self.next
            self.next += 2
            try:
                t0 = time.perf_counter()
                self.col.add([_doc(i), _doc(i + 1)])
                self.col.delete(f"live-{i}")
                self.seconds.append(time.perf_counter() - t0)
            except Exception as exc:  # counted, never expected
                self.errors.append(f"{type(exc).__name__}: {exc}")


def run(args: argparse.Namespace) -> Dict[str, object]:
    from medretrieve.corpus.collection import Collection
    from medretrieve.retrieval.retriever import Retriever

    work = Path(args.work or tempfile.mkdtemp(prefix="live-updates-"))
    source = Path(args.collection) if args.collection else work / "demo"
    if not (source / "manifest.json").is_file():
        from medretrieve.cli.demo import DEMO_CORPUS

        Collection.build(DEMO_CORPUS, source, encoder="default", progress=False)
    live = work / "live"
    shutil.rmtree(live, ignore_errors=True)
    shutil.copytree(source, live)
    col = Collection.open(live, encoder_threads=1)  # searches side by side: one ONNX thread each
    questions = [q["body"] for q in json.loads((ROOT / "examples" / "demo_questions.json").read_text())["questions"]]
    retriever = Retriever(col, ranker="default" if args.full else None)
    options = {} if args.full else {"expand": False, "rerank": False, "recovery": False}

    phase = ["quiet"]
    budget = {"n": 0}
    lat: Dict[str, List[float]] = collections.defaultdict(list)
    errors: Dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    lock = threading.Lock()
    go = threading.Event()
    window_done = threading.Event()
    finished = threading.Event()

    def searcher(t: int) -> None:
        i = t
        local: Dict[str, List[float]] = collections.defaultdict(list)
        while not finished.is_set():
            if not go.is_set():
                go.wait(0.05)
                continue
            with lock:
                if budget["n"] <= 0:
                    window_done.set()
                    go.clear()
                    continue
                budget["n"] -= 1
                kind = phase[0]
            t0 = time.perf_counter()
            try:
                retriever.search(questions[i % len(questions)], k=10, deadline_ms=None, **options)
            except Exception as exc:  # every failure is counted by type
                with lock:
                    errors[kind][f"{type(exc).__name__}: {str(exc)[:120]}"] += 1
            local[kind].append((time.perf_counter() - t0) * 1000.0)
            i += args.threads
        with lock:
            for k, v in local.items():
                lat[k].extend(v)

    writer = Writer(col)
    writer.start()
    threads = [threading.Thread(target=searcher, args=(t,), daemon=True) for t in range(args.threads)]
    for t in threads:
        t.start()
    t_start = time.perf_counter()
    updates_before = 0
    updates = {"quiet": 0, "updates": 0}
    for r in range(args.rounds):
        for kind, n in (("quiet", args.quiet // args.rounds), ("updates", args.searches // args.rounds)):
            with lock:
                phase[0] = kind
                budget["n"] = n
            if kind == "updates":
                writer.active.set()
            window_done.clear()
            go.set()
            window_done.wait()
            while True:  # the window's last searches finish before the next window starts
                with lock:
                    if budget["n"] <= 0:
                        break
                time.sleep(0.01)
            time.sleep(0.2)
            if kind == "updates":
                writer.active.clear()
                writer.idle.wait()
                updates["updates"] += len(writer.seconds) - updates_before
                updates_before = len(writer.seconds)
        print(f"round {r + 1}/{args.rounds}: {time.perf_counter() - t_start:.0f} s, {len(writer.seconds)} updates",
              file=sys.stderr, flush=True)
    finished.set()
    for t in threads:
        t.join()
    writer.stop.set()
    writer.join()

    back = Collection.open(live)
    consistent = (back.n_documents == col.n_documents and len(back) == len(col)
                  and back.lexical.has_exactly(np.flatnonzero(back.alive)))
    rows = {}
    for kind in ("quiet", "updates"):
        x = np.asarray(lat[kind])
        rows[kind] = {"searches": int(len(x)), "errors": int(sum(errors[kind].values())),
                      "error_kinds": dict(errors[kind]), "p50_ms": float(np.percentile(x, 50)),
                      "p90_ms": float(np.percentile(x, 90)), "p99_ms": float(np.percentile(x, 99)),
                      "max_ms": float(x.max()), "updates": updates[kind]}
    return {"threads": args.threads, "rounds": args.rounds, "full": args.full, "chunks_at_end": len(col),
            "documents_at_end": col.n_documents, "update_mean_ms": float(np.mean(writer.seconds) * 1000.0),
            "update_errors": writer.errors[:5], "reopened_consistent": consistent,
            "p99_ratio": rows["updates"]["p99_ms"] / rows["quiet"]["p99_ms"], "windows": rows,
            "seconds": time.perf_counter() - t_start}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--searches", type=int, default=100_000, help="searches in update windows, in all")
    p.add_argument("--quiet", type=int, default=20_000, help="searches in quiet windows, in all")
    p.add_argument("--threads", type=int, default=8)
    p.add_argument("--rounds", type=int, default=10)
    p.add_argument("--collection", help="a collection to copy (default: the demo corpus, built into --work)")
    p.add_argument("--work", help="folder for the demo collection and the live copy (default: a temp folder)")
    p.add_argument("--full", action="store_true", help="the whole pipeline (expansion, learned ranker, recovery)")
    p.add_argument("--out", help="write the results as JSON here")
    args = p.parse_args()
    res = run(args)
    print(f"{'window':<8} {'searches':>9} {'errors':>6} {'p50 ms':>7} {'p90 ms':>7} {'p99 ms':>7} {'max ms':>7} "
          f"{'updates':>7}")
    for kind, r in res["windows"].items():  # type: ignore[union-attr]
        print(f"{kind:<8} {r['searches']:>9} {r['errors']:>6} {r['p50_ms']:>7.1f} {r['p90_ms']:>7.1f} "
              f"{r['p99_ms']:>7.1f} {r['max_ms']:>7.1f} {r['updates']:>7}")
    print(f"p99 with updates / without: {res['p99_ratio']:.2f}; update (add 2 + delete 1, written) "
          f"{res['update_mean_ms']:.0f} ms mean; reopened collection consistent: {res['reopened_consistent']}; "
          f"{res['seconds']:.0f} s")
    for kind, r in res["windows"].items():  # type: ignore[union-attr]
        for what, n in r["error_kinds"].items():
            print(f"  {kind}: {n} x {what}")
    if args.out:
        Path(args.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
