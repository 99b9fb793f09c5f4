"""PubMed as the candidate source (issue 36, item 2), against the fake E-utilities server on loopback (no network)
with NCBI-like delays: every call answered after a seeded random 300-800 ms, NCBI's 3 requests/s without a key.

Articles: the documents of a BioASQ golden file (default ``12B1_golden.json`` from the shared data), each served as
a MEDLINE article made of its golden snippets (title snippets as the title, the rest as the abstract), under its
real PMID; questions: that file's first ``--questions`` bodies. The fake reads terms as PubMed does (words ANDed,
OR groups). Without the shared data, the 52 demo documents and the six demo questions stand in.

Runs, one after the other in one process, PubMed only (an empty local collection, the seed's setting), k=10,
retmax 100, no deadline:

- ``cold``: empty cache folder, the first run of the process;
- ``second run``: a new source and online stage over the same cache folder (what a new process sees): searches,
  records and chunk vectors all come from the cache;
- ``records cached, vectors not``: the same cache for searches and records, chunk vectors neither kept nor read
  (what the package did before the vector cache: every question encodes its articles again);
- ``cold, deadline 3,000 ms``: empty cache, what fits.

Per run: the median and p90 over the questions of the total and of each stage (ms), the E-utilities requests, and
articles encoded with their rate (articles/s, chunking + encoding). Then the encoder alone on the same articles:
chunks encoded per article (``batch_chunks=1``) against one search's misses together (16, 64 chunks per call),
interleaved over ``--rounds``. Then the rate limiter (24 searches from 24 threads).

Usage (under the bench lock, the machine is shared)::

    MEDRETRIEVE_CORE_DIR=build/dev PYTHONPATH=python MEDRETRIEVE_SHARED_DATA=../shared/data \\
      flock /tmp/bench.lock nice python bench/probes/online.py --questions 12 --rounds 3

Prints markdown tables for bench/RESULTS.md.
"""
from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "support"))
# the shared data: $MEDRETRIEVE_SHARED_DATA, else ../shared/data beside the checkout (or beside its parent folder)
SHARED = Path(os.environ.get("MEDRETRIEVE_SHARED_DATA") or next(
    (p for p in (ROOT.parent / "shared" / "data", ROOT.parent.parent / "shared" / "data") if p.is_dir()),
    ROOT.parent / "shared" / "data"))

from pubmed_server import FakeEutils, medline_articles  # noqa: E402

from medretrieve.cli.demo import DEMO_CORPUS, DEMO_QUESTIONS  # noqa: E402
from medretrieve.corpus.memory import MemoryCollection  # noqa: E402
from medretrieve.corpus.pubmed import PubMedSource  # noqa: E402
from medretrieve.corpus.sources import Record, Section, read_records  # noqa: E402
from medretrieve.models.encoders import default_model_dir  # noqa: E402
from medretrieve.retrieval.online import OnlineStage  # noqa: E402
from medretrieve.retrieval.pool_filler import PoolFiller, VectorStore  # noqa: E402
from medretrieve.retrieval.retriever import Retriever  # noqa: E402

STAGES = ("pubmed_search", "pubmed_fetch", "pool", "pubmed_recovery")
POOL_NOTE = re.compile(r"(\d+) from the vector cache, (\d+) encoded(?: \((\d+) chunks in (\d+) ms)?")


def golden_articles(path: Path, n_questions: int) -> Tuple[List[Record], List[str]]:
    """Articles made of a golden file's snippets, and its first question bodies."""
    data = json.loads(path.read_text(encoding="utf-8"))["questions"]
    titles: Dict[str, str] = {}
    parts: Dict[str, Dict[int, str]] = {}
    for q in data:
        for sn in q.get("snippets", []):
            pmid = sn["document"].rstrip("/").rsplit("/", 1)[-1]
            if sn.get("beginSection") == "title":
                titles[pmid] = sn["text"]
            else:
                parts.setdefault(pmid, {})[int(sn.get("offsetInBeginSection", 0))] = sn["text"]
    records = []
    for pmid in sorted(set(titles) | set(parts)):
        text = " ".join(t for _, t in sorted(parts.get(pmid, {}).items()))
        sections = [Section("", text)] if text.strip() else []
        if sections or titles.get(pmid):
            records.append(Record(pmid, titles.get(pmid, ""), sections or [Section("", titles[pmid])]))
    return records, [q["body"] for q in data[:n_questions]]


def workload(golden: str, n_questions: int) -> Tuple[List[Record], List[str], str]:
    path = SHARED / "bioasq" / golden
    if path.is_file():
        records, questions = golden_articles(path, n_questions)
        return records, questions, f"{len(records)} articles from the snippets of {golden}, its first " \
                                   f"{len(questions)} questions"
    records = list(read_records(str(DEMO_CORPUS)))
    return records, list(DEMO_QUESTIONS), f"{len(records)} demo documents, the {len(DEMO_QUESTIONS)} demo questions"


def pct(xs: Sequence[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def run(label: str, srv: FakeEutils, cache: Optional[Path], questions: List[str], encoder: Path,
        deadline_ms: Optional[float] = None, **stage_kw) -> List[str]:
    """One run of every question with a fresh source and online stage; a table row."""
    before = srv.count()
    src = PubMedSource(srv.base_url, cache_dir=cache)
    ret = Retriever(MemoryCollection.from_encoders(encoder), online=OnlineStage(src, retmax=100, **stage_kw))
    results = [ret.search(q, k=10, deadline_ms=deadline_ms) for q in questions]
    src.close()
    encoded = chunks = 0
    encode_ms = 0.0
    for r in results:
        for name in ("pool", "pubmed_recovery"):
            st = r.stage(name)
            m = POOL_NOTE.search(st.reason) if st is not None else None
            if m:
                encoded += int(m.group(2))
                chunks += int(m.group(3) or 0)
                encode_ms += float(m.group(4) or 0)
    totals = [r.timings_ms["total"] for r in results]
    cells = [label, f"{statistics.median(totals):.0f} / {pct(totals, 0.9):.0f}"]
    for name in STAGES:
        xs = [r.timings_ms.get(name, 0.0) for r in results]
        cells.append(f"{statistics.median(xs):.0f}")
    rest = [r.timings_ms["total"] - sum(r.timings_ms.get(n, 0.0) for n in STAGES) for r in results]
    cells.append(f"{statistics.median(rest):.0f}")
    cells.append(str(srv.count() - before))
    rate = f"{encoded / (encode_ms / 1000.0):.1f}" if encode_ms else "-"
    cells.append(f"{encoded} ({chunks} chunks), {rate}/s")
    cells.append(str(sum(1 for r in results if r.hits)))
    return cells


def encoder_rates(records: List[Record], encoder: Path, rounds: int) -> List[List[str]]:
    """Articles/s of one search's misses encoded per article against together (same articles, interleaved)."""
    sample = records[:100]
    took: Dict[int, List[float]] = {1: [], 16: [], 64: []}
    for _ in range(rounds):
        for batch in took:
            pool = MemoryCollection.from_encoders(encoder)
            t0 = time.perf_counter()
            report = PoolFiller(VectorStore(None, 0), batch_chunks=batch).fill(pool, sample, lambda: float("inf"))
            took[batch].append(time.perf_counter() - t0)
            n_chunks = report.chunks_encoded
    base = statistics.median(took[1])
    return [[f"{b} chunk{'s' if b > 1 else ''} per call" + (" (one article at a time)" if b == 1 else ""),
             f"{len(sample) / statistics.median(t):.1f}", f"{n_chunks / statistics.median(t):.1f}",
             f"{base / statistics.median(t):.2f}x"] for b, t in took.items()]


def rate(articles, api_key) -> tuple:
    with FakeEutils() as srv:
        srv.articles = articles
        sources = [PubMedSource(srv.base_url, api_key=api_key) for _ in range(2)]
        threads = [threading.Thread(target=lambda i=i: sources[i % 2].search(f"diabetes {i}")) for i in range(24)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - t0
        for s in sources:
            s.close()
        return srv.max_per_window(1.0), took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--golden", default="12B1_golden.json", help="BioASQ golden file of the shared data")
    ap.add_argument("--questions", type=int, default=12, help="questions per run")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the encoder comparison")
    ap.add_argument("--latency", default="0.3,0.8", help="fake E-utilities delay per call, low,high (s)")
    args = ap.parse_args()
    low, high = (float(x) for x in args.latency.split(","))
    records, questions, what = workload(args.golden, args.questions)
    articles = medline_articles(records)
    encoder = default_model_dir()
    print(f"{what}; PubMed only, k=10, retmax 100; fake E-utilities {low * 1000:.0f}-{high * 1000:.0f} ms a call, "
          f"3 requests/s; ms: median (total: median / p90) over the questions\n")
    print("| run | total | pubmed_search | pubmed_fetch | pool (vectors + encoding) | pubmed_recovery | ranking "
          "and the rest | E-utilities requests | articles encoded, rate | questions with hits |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    with tempfile.TemporaryDirectory() as tmp, FakeEutils(boolean=True, latency_s=(low, high)) as srv:
        srv.articles = articles
        cache = Path(tmp) / "cache"
        rows = [run("cold (empty cache)", srv, cache, questions, encoder),
                run("second run (same cache folder, new process)", srv, cache, questions, encoder),
                run("records cached, vectors not (before)", srv, cache, questions, encoder, vectors=None,
                    memory_articles=0),
                run("cold, deadline 3,000 ms", srv, Path(tmp) / "cold2", questions, encoder, deadline_ms=3000)]
        for r in rows:
            print("| " + " | ".join(r) + " |")
    print("\n| encoding one search's 100 articles (no cache) | articles/s | chunks/s | vs one article at a time |")
    print("| --- | ---: | ---: | ---: |")
    for r in encoder_rates(records, encoder, args.rounds):
        print("| " + " | ".join(r) + " |")
    print("\n| rate limiter (24 searches at once: 24 threads, 2 sources) | most requests in any 1 s | s for all 24 |")
    print("| --- | ---: | ---: |")
    for label, key in (("no API key (NCBI: 3/s)", None), ("API key (NCBI: 10/s)", "KEY")):
        most, took = rate(articles, key)
        print(f"| {label} | {most} | {took:.2f} |")


if __name__ == "__main__":
    main()
