"""``medretrieve demo``: answer medical questions from a small built-in corpus, offline, with cited sources.

The corpus (``assets/demo_corpus.jsonl``, 52 short textbook-style passages written for medretrieve) is chunked,
embedded with the embedded default encoder (``models.encoders.default_model_dir``) and indexed once
into the cache (``medretrieve.models.encoders.cache_dir()/demo``); the cached collection is rebuilt only when the
corpus, the model or medretrieve's version changes. Each question is answered from the retrieved evidence: with
no LLM the answer is made of the evidence's own sentences (extractive), with ``--llm`` the model writes it; every
sentence cites its source and the citation is checked.
"""
from __future__ import annotations

import argparse
import hashlib
import shutil
import sys
import time
from typing import Any, Dict, List, Optional, Sequence, TextIO

from .._assets import ASSETS
from .answer import format_answer
from .options import HelpFormatter, deadline
from .search import format_result

DEMO_CORPUS = ASSETS / "demo_corpus.jsonl"
DEMO_QUESTIONS = (
    "What is the first-line drug treatment for type 2 diabetes?",
    "Is levodopa used to treat Parkinson's disease?",
    "Which drugs are used to prevent stroke in atrial fibrillation?",
    "What are the symptoms of a pulmonary embolism?",
    "How is an MI diagnosed?",
    "What is the role of IL-6 in inflammation?",
)


def demo_collection(progress: bool = False, out: Optional[TextIO] = None) -> Any:
    """The demo collection, built into the cache on first use and reused while the corpus, the model and
    medretrieve's version stay the same (older demo builds in the cache are removed)."""
    from .._version import __version__
    from ..corpus.collection import Collection
    from ..models.encoders import cache_dir, default_model_dir, read_manifest

    model = default_model_dir()
    key = hashlib.sha256(DEMO_CORPUS.read_bytes() + read_manifest(model).sha256.encode()
                         + __version__.encode()).hexdigest()[:16]
    root = cache_dir() / "demo"
    target = root / key
    if (target / "manifest.json").is_file():
        return Collection.open(target)
    t0 = time.perf_counter()
    col = Collection.build(DEMO_CORPUS, target, encoder=model, progress=progress, overwrite=True)
    for stale in root.iterdir():  # demo builds of other corpus / model / version keys: ours, replaced
        if stale.is_dir() and stale.name != key and len(stale.name) == 16 and not stale.name.startswith("."):
            shutil.rmtree(stale, ignore_errors=True)
    if out is not None:
        print(f"built the demo collection ({col.n_documents} documents, {len(col)} chunks) in "
              f"{time.perf_counter() - t0:.1f} s; cached at {target}", file=out)
    return col


def run_demo(questions: Sequence[str] = DEMO_QUESTIONS, k: int = 3, deadline_ms: Optional[float] = 300.0,
             llm: Optional[str] = None, model: Optional[str] = None, verbose: bool = False,
             out: Optional[TextIO] = None) -> List[Any]:
    """Answer ``questions`` from the demo collection (built or taken from the cache), printing as it goes (to
    ``out``, default stdout); returns the :class:`~medretrieve.generation.generate.Answer` list."""
    from ..generation.generate import Answerer
    from ..retrieval.retriever import Retriever

    out = out or sys.stdout
    col = demo_collection(out=out)
    retriever = Retriever(col)
    backend = None
    if llm:
        from ..generation.llm import OpenAIBackend

        backend = OpenAIBackend(llm, model or "default")
    results = []
    shown: Dict[str, Any] = {"res": None}

    class _Recording:  # keeps the search result for --verbose without searching twice
        def search(self, question: str, **kw: Any) -> Any:
            shown["res"] = retriever.search(question, **kw)
            return shown["res"]

    answerer = Answerer(_Recording(), backend, k=k, retrieve_deadline_ms=deadline_ms)
    print(f"answers {'by ' + (model or 'the LLM') + ' at ' + llm if llm else 'from the evidence (no LLM)'}; "
          f"{len(col)} chunks", file=out)
    for q in questions:
        ans = answerer.answer(q)
        results.append(ans)
        print(f"\nQ: {q}", file=out)
        print(format_answer(ans, verbose=verbose), file=out)
        if verbose and shown["res"] is not None:
            print(format_result(shown["res"]), file=out)
    return results


def add_demo(sub: Any) -> None:
    p = sub.add_parser("demo", help="answer questions from a small built-in corpus, offline, with cited sources",
                       formatter_class=HelpFormatter)
    p.add_argument("question", nargs="*", help="your own questions (default: a built-in set)")
    p.add_argument("--k", type=int, default=3, help="evidence passages per answer")
    p.add_argument("--deadline-ms", type=deadline, default=300.0, help="retrieval budget in ms ('none': no deadline)")
    p.add_argument("--llm", default=None, metavar="BASE_URL",
                   help="an OpenAI-compatible server to write the answers (default: extractive answers, no LLM)")
    p.add_argument("--model", default=None, help="model name for --llm")
    p.add_argument("--verbose", action="store_true", help="also show the stages, their timings and the hits")
    p.set_defaults(func=_cli_demo)


def _cli_demo(args: argparse.Namespace) -> int:
    run_demo(args.question or DEMO_QUESTIONS, k=args.k, deadline_ms=args.deadline_ms, llm=args.llm,
             model=args.model, verbose=args.verbose)
    return 0
