"""CLI start-up: time to the first result of ``medretrieve search`` on a 100k-chunk collection on disk.

    python bench/probes/startup.py [--work DIR] [--chunks 100000] [--runs 5]
                            [--other-pythonpath DIR --other-core-dir DIR --other-collection DIR]

The collection is the BioASQ 7b closed corpus (``bench/retrieval.py``) grown to ``--chunks`` with its
synthetic filler, written to ``--work`` once and reused. Each run is a fresh process: ``python -m medretrieve
search COLLECTION QUESTION`` (a different BioASQ question each run), timed from spawn to exit; then the same
in-process split into import, open, retriever set-up and first search. ``--other-*`` times another checkout of the
package (e.g. an older commit, on a collection it built itself) in the same run, alternating with this one so
both see the same machine load; it runs with that collection as its working directory and the path ``.``.

Byte-code: an installed package has its modules compiled at install time, so the children may cache byte-code
(``PYTHONDONTWRITEBYTECODE`` is dropped; the cache goes to ``WORK/pycache`` via ``PYTHONPYCACHEPREFIX``, not into
the checkout), and one untimed run per checkout comes first (it compiles, and brings the files into the page cache).
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
from typing import Dict, List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a probe: bench/'s shared helpers are one level up
import bioasq_corpus as bench  # noqa: E402  (bench/bioasq_corpus.py: the BioASQ collection and its filler)

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


def timed_search(question: str, target: str, env: Dict[str, str], cwd: Optional[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "medretrieve", "search", target, question, "--k", "10"],
                   check=True, env=env, cwd=cwd, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def summary(label: str, walls: List[float]) -> str:
    return (f"{label}: wall s min {min(walls):.2f} / median {statistics.median(walls):.2f} / max {max(walls):.2f} "
            f"over {len(walls)} runs")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", default="/tmp/medretrieve-bench-retrieval")
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--other-pythonpath", default=None, help="another checkout's python/ folder to time as well")
    p.add_argument("--other-core-dir", default=None, help="its native build folder (MEDRETRIEVE_CORE_DIR)")
    p.add_argument("--other-collection", default=None, help="a collection that checkout built")
    args = p.parse_args()
    col = build(Path(args.work), args.chunks)
    questions = [q["body"] for q in bench.load_questions()]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(Path(args.work) / "pycache")
    other = None
    if args.other_pythonpath:
        other = dict(env, PYTHONPATH=args.other_pythonpath)
        if args.other_core_dir:
            other["MEDRETRIEVE_CORE_DIR"] = args.other_core_dir
    walls: List[float] = []
    other_walls: List[float] = []
    timed_search(questions[-1], str(col), env, None)  # untimed: compiles, warms the page cache
    if other is not None:
        timed_search(questions[-1], ".", other, args.other_collection)
    for i in range(args.runs):
        walls.append(timed_search(questions[i], str(col), env, None))
        if other is not None:
            other_walls.append(timed_search(questions[i], ".", other, args.other_collection))
    print(summary(f"medretrieve search on {args.chunks} chunks (this checkout)", walls))
    if other is not None:
        print(summary(f"medretrieve search on {args.chunks} chunks ({args.other_pythonpath})", other_walls))
    parts = [json.loads(subprocess.run([sys.executable, "-c", SPLIT, str(col), questions[i]], check=True,
                                       env=env, capture_output=True, text=True).stdout)
             for i in range(args.runs)]
    print("this checkout, median split, s: "
          + ", ".join(f"{k} {statistics.median(x[k] for x in parts):.3f}" for k in parts[0]))


if __name__ == "__main__":
    main()
