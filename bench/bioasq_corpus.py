"""What the BioASQ benchmarks share: the golden files and their questions, the closed-corpus collection of a year
(every distinct golden snippet a chunk), that collection grown with a synthetic filler to 100k+ chunks for the
latency and serving benchmarks, and the document metrics. ``bench/retrieval.py``, ``serve.py``, ``weak.py``,
``langchain_stack.py`` and ``distributed.py`` import it (a script run as ``python bench/NAME.py`` finds it beside
itself).

The filler: each synthetic chunk's vector is the normalised mean of three real chunks' vectors plus small noise, its
text two sentences of each of those chunks, its section label random; 5 chunks to a synthetic document. It gives the
index, BM25 and the reranker realistic work at scale; the real chunks' questions still have their gold among them.
"""
from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Dict, List, Sequence

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MEDRETRIEVE_SHARED_DATA", ROOT.parent / "shared" / "data")) / "bioasq"


def norm(text: str) -> str:
    return " ".join(text.lower().split())


def file_key(name: str) -> str:
    """A golden file's short name: "7B1" for 7B1_golden.json (what --holdout and --cross-fit list)."""
    return name.split("_")[0]


def year_files(year: str = "7B") -> List[Path]:
    """The golden files of one BioASQ year ("7B": 7B1-5, "12B": 12B1-4), or of several joined by "+"
    ("7B+12B": the nine files, what the shipped defaults are fitted on)."""
    files = [f for y in year.upper().split("+") for f in sorted(DATA.glob(f"{y}[0-9]*_golden.json"))]
    if not files:
        sys.exit(f"no {year} golden files in {DATA}")
    return files


def load_questions(year: str = "7B") -> List[dict]:
    from medretrieve.corpus.sources import pmid_from_url

    out = []
    for f in year_files(year):
        for q in json.loads(f.read_text())["questions"]:
            docs = set()
            for d in q.get("documents") or []:
                try:
                    docs.add(pmid_from_url(d))
                except ValueError:
                    pass
            out.append({"file": f.name, "id": q["id"], "body": q["body"], "type": q["type"], "docs": docs,
                        "snippets": [norm(s["text"]) for s in q.get("snippets") or []]})
    return out


def build_bioasq_collection(encoder: str, work: Path, year: str = "7B"):
    """The closed corpus of one BioASQ year (every distinct snippet a chunk), built once under ``work``."""
    from medretrieve.corpus.collection import Collection

    out = work / ("bioasq-collection" if year.upper() == "7B"
                  else f"bioasq-{year.lower().replace('+', '-')}-collection")
    if (out / "manifest.json").is_file():
        return Collection.open(out)
    files = year_files(year)
    t0 = time.perf_counter()
    col = Collection.build(files, out, encoder=encoder, format="bioasq", progress=True)
    print(f"built {len(col)} chunks / {col.n_documents} documents in {time.perf_counter() - t0:.0f} s",
          file=sys.stderr)
    return col


def doc_metrics(ranked: Sequence, relevant: set) -> Dict[str, float]:
    """MAP@10, R@10 and nDCG@10 of a ranked list of document ids ({} without relevant documents)."""
    from medretrieve.evaluation.metrics import average_precision_at_k, ndcg_at_k, recall_at_k

    if not relevant:
        return {}
    return {"MAP@10": average_precision_at_k(ranked, relevant, 10), "R@10": recall_at_k(ranked, relevant, 10),
            "nDCG@10": ndcg_at_k(ranked, relevant, 10)}



def doc_ranking(hits) -> List[str]:
    """The first 10 distinct documents of a ranked list of hits."""
    return list(dict.fromkeys(h.document_id for h in hits))[:10]



def filler_batches(col, n_total: int, seed: int = 0, batch: int = 20_000):
    """Synthetic filler growing ``col`` to ``n_total`` chunks (module docstring): ``(rows, vectors)`` batches, rows
    numbered on from ``len(col.rows)``."""
    from medretrieve.corpus.chunking import split_sentences
    from medretrieve.corpus.chunk_table import ChunkRow

    rng = np.random.default_rng(seed)
    need = n_total - len(col.rows)
    real = np.flatnonzero(col.alive)
    vecs = col.vectors(real.tolist())
    sents = [split_sentences(col.rows[int(i)].text) for i in real]
    start = len(col.rows)
    while need > 0:
        b = min(batch, need)
        src = rng.integers(0, len(real), size=(b, 3))
        v = vecs[src].mean(axis=1) + rng.normal(0, 0.02, size=(b, vecs.shape[1])).astype(np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        labels = rng.integers(0, 10, size=b)
        rows = [ChunkRow(start + j, f"filler-{start + j}", f"filler-{(start + j) // 5}", "", "",
                         " ".join(s for k in src[j] for s in sents[k][:2]), "", 0, f"filler-{start + j}#s0",
                         int(labels[j])) for j in range(b)]
        yield rows, v.astype(np.float32)
        start += b
        need -= b
        print(f"  filler: {start} chunks", file=sys.stderr)


def filled_collection(encoder: str, work: Path, n_total: int, threads: int = -1) -> Path:
    """The BioASQ collection grown to ``n_total`` chunks with the filler, written out of core
    (``medretrieve.corpus.builder``: the base rows and the filler go to disk a batch at a time) and reused."""
    from medretrieve.corpus.builder import CollectionBuilder

    out = work / f"bioasq-{n_total}"
    if (out / "manifest.json").is_file():
        return out
    col = build_bioasq_collection(encoder, work)
    m = col.manifest
    t0 = time.perf_counter()
    builder = CollectionBuilder(out, col.directory / m["encoder"]["dir"], chunking=m["chunking"],
                                dtype=m["index"]["dtype"], M=m["index"]["M"],
                                ef_construction=m["index"]["ef_construction"], threads=threads, overwrite=True)
    base = list(range(len(col.rows)))
    builder.add_rows([col.rows[i] for i in base], col.vectors(base), list(col.sections.values()))
    with open("/proc/self/clear_refs", "w") as fh:  # the peak from here on is the build's
        fh.write("5")
    before = status_kb()
    for rows, v in filler_batches(col, n_total):
        builder.add_rows(rows, v)
    t1 = time.perf_counter()
    written = status_kb()["VmHWM"]
    builder.finish()
    peak = status_kb()["VmHWM"]
    sizes = {name: sum(f.stat().st_size for f in (out / name).rglob("*")) if (out / name).is_dir()
             else (out / name).stat().st_size for name in ("dense.index", "lexical", "chunks.jsonl", "rows")}
    print(f"{n_total} chunks written in {t1 - t0:.0f} s, indexed in {time.perf_counter() - t1:.0f} s; resident "
          f"memory before {before['VmRSS'] / 2**20:.2f} GiB, peak while writing {written / 2**20:.2f} GiB, while "
          f"indexing {peak / 2**20:.2f} GiB; files (GiB): "
          + ", ".join(f"{k} {v / 2**30:.2f}" for k, v in sizes.items()), file=sys.stderr)
    return out


def status_kb() -> Dict[str, int]:
    """VmRSS, VmHWM, RssAnon, RssFile of this process (kB)."""
    from medretrieve.distributed.shard_actor import process_memory

    return {k: v // 1024 for k, v in process_memory().items()}


def rss() -> str:
    """The process's resident memory: anonymous (heap) and file-backed (memory-mapped collection files)."""
    kb = status_kb()
    return (f"RSS {kb['VmRSS'] / 2**20:.2f} GiB (anonymous {kb['RssAnon'] / 2**20:.2f}, "
            f"file-backed {kb['RssFile'] / 2**20:.2f})")


