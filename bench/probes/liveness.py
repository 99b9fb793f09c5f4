"""Writer liveness: how much slower an add (and a save) gets while other threads search continuously.

    python bench/probes/liveness.py [--base 20000] [--rows 20000] [--dim 384] [--searchers 4] [--nq 64] [--timeout 300]

For each index kind, a base of ``base`` vectors is built, then ``rows`` more are added in one call, once with the
index to itself and once while ``searchers`` threads search it back to back (``nq`` queries, k=10, one thread per
call). The same for ``save`` (an exclusive operation on both kinds). A lock that prefers readers lets the searchers
starve the writer: the contended time is then only bounded by ``--timeout`` (the searchers stop at that point, so
the writer finishes). Goal: contended <= 5x alone. Prints one markdown table.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
from typing import Callable, Optional

import numpy as np

import medretrieve


def build(kind: str, x: np.ndarray) -> object:
    if kind.startswith("FlatIndex"):
        idx = medretrieve.FlatIndex("ip", x.shape[1], dtype=kind.split()[1])
    else:
        idx = medretrieve.Index("ip", x.shape[1])
        idx.init_index(2 * len(x) + 1, M=16, ef_construction=100, dtype=kind.split()[1])
    idx.add(x)
    return idx


def timed(fn: Callable[[], None]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def contended(idx: object, q: np.ndarray, searchers: int, timeout: float, op: Callable[[], None]) -> tuple[float, int, bool]:
    """(seconds of op while searchers run, searches done meanwhile, whether the timeout stopped the searchers)."""
    stop = threading.Event()
    searches = [0] * searchers

    def search(i: int) -> None:
        while not stop.is_set():
            idx.search(q, 10, num_threads=1)  # type: ignore[attr-defined]
            searches[i] += 1

    threads = [threading.Thread(target=search, args=(i,)) for i in range(searchers)]
    for t in threads:
        t.start()
    time.sleep(0.5)  # the searchers are in their loop before the writer arrives
    before = sum(searches)
    result: list[Optional[float]] = [None]
    writer = threading.Thread(target=lambda: result.__setitem__(0, timed(op)))
    t0 = time.perf_counter()
    writer.start()
    writer.join(timeout)
    timed_out = writer.is_alive()
    stop.set()
    writer.join()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0 if timed_out else float(result[0] or 0.0)
    return elapsed, sum(searches) - before, timed_out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", type=int, default=20_000)
    p.add_argument("--rows", type=int, default=20_000)
    p.add_argument("--dim", type=int, default=384)
    p.add_argument("--searchers", type=int, default=4)
    p.add_argument("--timeout", type=float, default=300.0)
    p.add_argument("--nq", type=int, default=64, help="queries per search call")
    p.add_argument("--kinds", default="FlatIndex float32,FlatIndex int8,Index int8")
    args = p.parse_args()
    rng = np.random.default_rng(0)
    base = rng.standard_normal((args.base, args.dim)).astype(np.float32)
    new = rng.standard_normal((args.rows, args.dim)).astype(np.float32)
    q = rng.standard_normal((args.nq, args.dim)).astype(np.float32)
    ids = np.arange(args.base, args.base + args.rows)
    print(f"| index | operation | alone s | with {args.searchers} searchers s | ratio | searches meanwhile |")
    print("|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "i.mdr")
        for kind in args.kinds.split(","):
            for name in ("add", "save"):
                alone_idx, busy_idx = build(kind, base), build(kind, base)
                if name == "add":
                    ops = [lambda i=i: i.add(new, ids=ids, num_threads=2) for i in (alone_idx, busy_idx)]  # type: ignore[attr-defined]
                else:
                    ops = [lambda i=i: i.save(path) for i in (alone_idx, busy_idx)]  # type: ignore[attr-defined]
                alone = timed(ops[0])
                busy, searches, timed_out = contended(busy_idx, q, args.searchers, args.timeout, ops[1])
                shown = f"> {busy:.2f} (searchers stopped)" if timed_out else f"{busy:.2f}"
                print(f"| {kind} | {name} {args.rows if name == 'add' else ''} | {alone:.2f} | {shown} | "
                      f"{busy / alone:.1f}x | {searches} |", flush=True)


if __name__ == "__main__":
    main()
