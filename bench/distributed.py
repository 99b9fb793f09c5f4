"""Sharded search on one machine: one collection in process against 1, 2 and 4 shards on a local Ray cluster.

    python bench/distributed.py [--chunks 100000] [--shards 1,2,4] [--queries 300] [--clients 4] [--seconds 60]

The collection is the BioASQ closed corpus grown with its synthetic filler to ``--chunks``
(``bench/retrieval.py``'s ``filled_collection``, written to ``--work`` once and reused); it is split into N shards
without encoding again (``medretrieve.distributed.build.split_collection``). Per configuration:

- sequential: ``--queries`` BioASQ questions one after another, ``deadline_ms=300`` (the product default), the
  full pipeline without a cross-encoder: p50 / p99 of the wall time of ``search``, misses (> deadline + 10 ms),
  partial results, and the p50 of the ``shards`` stage (the fan-out: every shard's dense + BM25 first stage plus
  the round trip);
- throughput: ``--clients`` threads searching back to back for ``--seconds``: searches per second and their p99;
- memory: the resident memory of the driver and of each shard actor (anonymous / file-backed).

On this 2-core machine the shards, the driver and Ray's own processes share the same two cores, so more shards
cannot search faster here: the numbers show the overhead of the fan-out (serialisation, round trips, a process
per shard), not scaling. On a cluster each shard gets its own cores and its own memory.
"""
from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np

import bioasq_corpus as bench  # bench/bioasq_corpus.py: the BioASQ files, questions, collections and metrics


def _rss(b: Dict[str, int]) -> str:
    return f"{b['VmRSS'] / 2**30:.2f} ({b['RssAnon'] / 2**30:.2f} + {b['RssFile'] / 2**30:.2f})"


def sequential(ret, questions: List[str], deadline_ms: float) -> Dict[str, Any]:
    for q in questions[:5]:
        ret.search(q, k=10, deadline_ms=deadline_ms)
    lat, fan, partial = [], [], 0
    for q in questions:
        t0 = time.perf_counter()
        res = ret.search(q, k=10, deadline_ms=deadline_ms)
        lat.append((time.perf_counter() - t0) * 1000)
        fan.append(res.timings_ms.get("shards", 0.0))
        partial += res.partial
    a = np.array(lat)
    return {"p50": np.percentile(a, 50), "p99": np.percentile(a, 99), "misses": int((a > deadline_ms + 10).sum()),
            "partial": partial, "fan_p50": float(np.percentile(fan, 50)), "n": len(a)}


def throughput(ret, questions: List[str], clients: int, seconds: float, deadline_ms: float) -> Dict[str, Any]:
    stop = time.monotonic() + seconds
    lat: List[float] = []
    lock = threading.Lock()

    def client(offset: int) -> None:
        i = offset
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            ret.search(questions[i % len(questions)], k=10, deadline_ms=deadline_ms)
            with lock:
                lat.append((time.perf_counter() - t0) * 1000)
            i += clients

    threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - t0
    return {"qps": len(lat) / wall, "p99": float(np.percentile(lat, 99)) if lat else float("nan")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--chunks", type=int, default=100_000)
    p.add_argument("--shards", default="1,2,4")
    p.add_argument("--queries", type=int, default=300)
    p.add_argument("--clients", type=int, default=4)
    p.add_argument("--seconds", type=float, default=60.0)
    p.add_argument("--deadline-ms", type=float, default=300.0)
    p.add_argument("--work", default="/tmp/medretrieve-bench-retrieval")
    a = p.parse_args()
    import ray

    from medretrieve.corpus.collection import Collection
    from medretrieve.distributed import ShardedRetriever
    from medretrieve.distributed.build import split_collection
    from medretrieve.distributed.shard_actor import process_memory
    from medretrieve.models.encoders import default_model_dir
    from medretrieve.retrieval.retriever import Retriever

    work = Path(a.work)
    base = bench.filled_collection(str(default_model_dir()), work, a.chunks)
    questions = [q["body"] for q in bench.load_questions()][: a.queries]
    ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
    rows = []
    configs: List[Any] = [("1 collection, in process", None)] + [
        (f"{n} shard{'s' if n > 1 else ''} (Ray actors)", n) for n in (int(x) for x in a.shards.split(","))]
    for name, n in configs:
        if n is None:
            ret = Retriever(Collection.open(base))
        else:
            out = work / f"shards-{a.chunks}-{n}"
            if not (out / "shards.json").is_file():
                t0 = time.perf_counter()
                split_collection(base, out, n, overwrite=out.exists())
                print(f"split into {n} shards in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
            ret = ShardedRetriever(out)
        seq = sequential(ret, questions, a.deadline_ms)
        thr = throughput(ret, questions, a.clients, a.seconds, a.deadline_ms)
        mem = _rss(process_memory())
        shard_mem = "-"
        if n is not None:
            got = ret.shard_set.everywhere("memory", timeout_s=60)
            shard_mem = ", ".join(_rss(got.results[i]) for i in sorted(got.results))
            ret.close()
        rows.append(f"| {name} | {seq['p50']:.1f} | {seq['p99']:.1f} | {seq['misses']} / {seq['n']} | "
                    f"{seq['partial']} | {seq['fan_p50']:.1f} | {thr['qps']:.1f} | {thr['p99']:.0f} | {mem} | "
                    f"{shard_mem} |")
        print(rows[-1], file=sys.stderr, flush=True)
    print(f"\nSharded search: {a.chunks} chunks, deadline_ms={a.deadline_ms:g}, {len(questions)} sequential "
          f"queries, {a.clients} clients for {a.seconds:g} s, load average {os.getloadavg()[0]:.1f}\n")
    print("| configuration | p50 ms | p99 ms | misses | partial | fan-out p50 ms | QPS (clients) | p99 ms under load "
          "| driver RSS GiB (anon + file) | shard RSS GiB (anon + file) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(r)
    ray.shutdown()


if __name__ == "__main__":
    main()
