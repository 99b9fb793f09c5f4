"""Online retrieval (PubMed E-utilities) cost, against the fake E-utilities server on loopback (no network).

The built-in demo corpus is served as PubMed: its 52 documents become MEDLINE articles (PMIDs 40000001..) of the
fake server, whose esearch ranks them by the question's words. Measured, for the six demo questions:

- a local-only search (the demo corpus as a local collection) as the reference;
- an online-only search (empty in-memory collection + PubMed), cold (every E-utilities call answered by the
  server, under NCBI's 3 requests/s without a key) and warm (the on-disk cache answers: no request);
- an online search under a 1,000 ms deadline (how much of the pool fits);
- the rate limiter: most requests the server saw in any 1 s window, 24 searches from 24 threads, without and with
  an API key.

Per search, the median over the questions of the total and of the stages ``pubmed_search``, ``pubmed_fetch`` and
``pool`` (chunking + encoding the fetched records, int8 MiniLM on the CPU).

Usage: ``MEDRETRIEVE_CORE_DIR=build/dev PYTHONPATH=python:tests/support nice python bench/online.py``
Prints markdown tables for bench/RESULTS.md.
"""
from __future__ import annotations

import json
import re
import statistics
import sys
import tempfile
import threading
import time
import xml.etree.ElementTree as ET
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "support"))

from pubmed_server import FakeEutils  # noqa: E402

from medretrieve.cli.demo import DEMO_CORPUS, DEMO_QUESTIONS  # noqa: E402
from medretrieve.corpus.collection import Collection  # noqa: E402
from medretrieve.corpus.memory import MemoryCollection  # noqa: E402
from medretrieve.corpus.pubmed import PubMedSource  # noqa: E402
from medretrieve.models.encoders import default_model_dir  # noqa: E402
from medretrieve.retrieval.online import OnlineStage  # noqa: E402
from medretrieve.retrieval.retriever import Retriever  # noqa: E402


def demo_articles() -> dict:
    """The demo corpus as MEDLINE PubmedArticle elements (structured abstracts from its sections)."""
    out = {}
    for i, line in enumerate(DEMO_CORPUS.read_text(encoding="utf-8").splitlines(), 1):
        doc = json.loads(line)
        pmid = str(40_000_000 + i)
        art = ET.Element("PubmedArticle")
        cit = ET.SubElement(art, "MedlineCitation")
        ET.SubElement(cit, "PMID").text = pmid
        article = ET.SubElement(cit, "Article")
        ET.SubElement(article, "ArticleTitle").text = doc["title"]
        abstract = ET.SubElement(article, "Abstract")
        for sec in doc["sections"]:
            ET.SubElement(abstract, "AbstractText", Label=sec["title"].upper()).text = sec["text"]
        out[pmid] = art
    return out


def stage_ms(res, name: str) -> float:
    st = res.stage(name)
    return st.elapsed_ms if st is not None else 0.0


def run(retriever: Retriever, deadline_ms=None) -> list:
    return [retriever.search(q, k=10, deadline_ms=deadline_ms) for q in DEMO_QUESTIONS]


def row(label: str, results: list) -> list:
    med = lambda xs: statistics.median(xs)  # noqa: E731
    pools = [r.stage("pool").reason for r in results if r.stage("pool") is not None]
    counts = [re.search(r"(\d+) of (\d+) fetched documents encoded", x) for x in pools]
    encoded = "-" if not pools else (f"{sum(int(m.group(1)) for m in counts if m)} of "
                                     f"{sum(int(m.group(2)) for m in counts if m)}")
    return [label, f"{med([r.timings_ms['total'] for r in results]):.0f}",
            f"{med([stage_ms(r, 'pubmed_search') for r in results]):.0f}",
            f"{med([stage_ms(r, 'pubmed_fetch') for r in results]):.0f}",
            f"{med([stage_ms(r, 'pool') for r in results]):.0f}", encoded]


def rate(srv_factory, api_key) -> tuple:
    with srv_factory() as srv:
        sources = [PubMedSource(srv.base_url, api_key=api_key) for _ in range(2)]
        threads = [threading.Thread(target=lambda i=i: sources[i % 2].search(f"diabetes {i}")) for i in range(24)]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        took = time.perf_counter() - t0
        return srv.max_per_window(1.0), took


def main() -> None:
    articles = demo_articles()

    def server():
        srv = FakeEutils()
        srv.articles = articles
        return srv

    encoder = default_model_dir()
    with tempfile.TemporaryDirectory() as tmp:
        local = Collection.build(DEMO_CORPUS, Path(tmp) / "col", encoder=encoder, progress=False)
        rows = [row("local collection only (reference)", run(Retriever(local)))]
        with server() as srv:
            cache = Path(tmp) / "cache"
            src = PubMedSource(srv.base_url, cache_dir=cache)
            online = Retriever(MemoryCollection.from_encoders(encoder), online=OnlineStage(src, retmax=100))
            rows.append(row("PubMed only, cold (server answers, 3 req/s)", run(online)))
            n_requests = srv.count()
            rows.append(row("PubMed only, warm (on-disk cache)", run(online)))
            assert srv.count() == n_requests, "the warm run made requests"
            rows.append(row("local + PubMed, warm", run(Retriever(local, online=OnlineStage(src, retmax=100)))))
            rows.append(row("PubMed only, warm, deadline 1,000 ms", run(online, deadline_ms=1000)))
        print(f"{len(DEMO_QUESTIONS)} questions, k=10, {len(articles)} articles served, retmax 100; median ms\n")
        print("| search | total | pubmed_search | pubmed_fetch | pool (chunk + encode) | documents encoded (all "
          "questions) |")
        print("| --- | ---: | ---: | ---: | ---: | ---: |")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        print(f"\ncold run: {n_requests} E-utilities requests for {len(DEMO_QUESTIONS)} questions")
    print("\n| rate limiter (24 searches at once: 24 threads, 2 sources) | most requests in any 1 s | s for all 24 |")
    print("| --- | ---: | ---: |")
    for label, key in (("no API key (NCBI: 3/s)", None), ("API key (NCBI: 10/s)", "KEY")):
        most, took = rate(server, key)
        print(f"| {label} | {most} | {took:.2f} |")


if __name__ == "__main__":
    main()
