"""CLI start-up: time to the first result of ``medretrieve search`` on a 100k-chunk collection on disk.

    python bench/startup.py [--work DIR] [--chunks 100000] [--runs 5] [--pythonpath DIR]

The collection is the BioASQ 7b closed corpus (``bench/retrieval.py``) grown to ``--chunks`` with its
synthetic filler, written to ``--work`` once and reused. Each run is a fresh process: ``python -m medretrieve
search COLLECTION QUESTION`` (a different BioASQ question each run), timed from spawn to exit, then the same
in-process split into import, open, retriever set-up and first search. ``--pythonpath`` times another checkout
of the package (e.g. an older commit) against the same collection: the command then runs with the collection as
its working directory and the path ``.``, which older layouts also read.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import retrieval as bench  # noqa: E402  (bench/retrieval.py: the BioASQ collection and its filler)

SPLIT = r"""
import sys, time, json
t0 = time.perf_counter()
from medretrieve.corpus.collection import Collection
from medretrieve.retrieval.retriever import Retriever
t1 = time.perf_counter()
col = Collection.open(sys.argv[1])
t2 = time.perf_counter()
ret = Retriever(col)
t3 = time.perf_counter()
res = ret.search(sys.argv[2], k=10, deadline_ms=300)
t4 = time.perf_counter()
print(json.dumps({"import": t1 - t0, "open": t2 - t1, "retriever": t3 - t2, "search": t4 - t3}))
"""


def build(work: Path, chunks: int) -> Path:
    from medretrieve.models.encoders import default_model_dir

    return bench.filled_collection(str(default_model_dir()), work, chunks)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default="/tmp/medretrieve-bench-retrieval")
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--pythonpath", default=None, help="time the package at this path (default: the current one)")
    args = p.parse_args()
    col = build(Path(args.work), args.chunks)
    questions = [q["body"] for q in bench.load_questions()]
    env = dict(os.environ)
    cwd, target = None, str(col)
    if args.pythonpath:
        env["PYTHONPATH"] = args.pythonpath
        cwd, target = str(col), "."
    walls = []
    for i in range(args.runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "medretrieve", "search", target, questions[i], "--k", "10"],
                       check=True, env=env, cwd=cwd, stdout=subprocess.DEVNULL)
        walls.append(time.perf_counter() - t0)
    print(f"medretrieve search on {args.chunks} chunks ({args.pythonpath or 'this checkout'}): wall s "
          f"min {min(walls):.2f} / median {statistics.median(walls):.2f} / max {max(walls):.2f} over {args.runs} runs")
    if args.pythonpath is None:
        parts = [json.loads(subprocess.run([sys.executable, "-c", SPLIT, str(col), questions[i]], check=True,
                                           env=env, capture_output=True, text=True).stdout)
                 for i in range(args.runs)]
        print("median split, s: " + ", ".join(f"{k} {statistics.median(x[k] for x in parts):.3f}" for k in parts[0]))


if __name__ == "__main__":
    main()
