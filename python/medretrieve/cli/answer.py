"""``medretrieve answer``: retrieve evidence and answer, citing numbered sources (extractive, or an LLM with ``--llm``)."""
from __future__ import annotations

import json
import sys
from typing import Any

from ..generation.generate import MODES, SOURCE_FLOOR, field_of
from ..records import BIOASQ_TYPES, source_facts
from ..wire import FILTER_OPTIONS
from .options import HelpFormatter, deadline
from .search import add_search_options, score_label


def add_answer(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "answer",
        help="answer a question from a collection, citing sources (extractive, or written by an LLM with --llm)",
        description="Retrieve evidence from COLLECTION_DIR and answer QUESTION, citing numbered sources and checking "
        "each citation: with --llm an OpenAI-compatible model writes the answer (needs the 'llm' extra), without "
        "it the answer is made of the evidence's own sentences. --where, --include-retracted, --evidence-prior and "
        "--recency-half-life choose and weigh the evidence as they do for medretrieve search.",
        formatter_class=HelpFormatter,
    )
    p.add_argument("collection", metavar="COLLECTION_DIR", help="collection folder (medretrieve build)")
    p.add_argument("question", help="the question to answer")
    p.add_argument("--llm", default=None, metavar="BASE_URL",
                   help="OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1 (default: an extractive answer)")
    p.add_argument("--model", default=None, help="model name the server knows (with --llm)")
    p.add_argument("--mode", choices=MODES, default="cite",
                   help="cite: numbered sources and verified citations; answer_only or bioasq need --llm")
    p.add_argument("--qtype", choices=BIOASQ_TYPES, default=None, help="ask for an exact answer of this BioASQ type")
    p.add_argument("--k", type=int, default=10, help="evidence passages to retrieve")
    p.add_argument("--deadline-ms", type=deadline, default=None,
                   help="time budget for the whole answer in ms (default: none; retrieval keeps its 300 ms)")
    p.add_argument("--max-tokens", type=int, default=512, help="most tokens the LLM may write")
    add_search_options(p, FILTER_OPTIONS)  # the evidence's filter and priors: medretrieve search's own flags
    p.add_argument("--timeout-s", type=float, default=60.0, help="per-request LLM timeout in seconds")
    p.add_argument("--json", action="store_true", help="print the full answer as JSON")
    p.add_argument("--all-sources", action="store_true",
                   help="list every retrieved source (default: the cited ones and any scoring at least "
                        f"{SOURCE_FLOOR})")
    p.add_argument("--verbose", action="store_true", help="also print notes and timings")
    p.set_defaults(func=_answer)


def _answer(args: Any) -> int:
    from ..corpus.collection import Collection
    from ..generation.generate import Answerer
    from ..retrieval.retriever import Retriever

    if args.llm is None and args.mode != "cite":
        raise ValueError(f"--mode {args.mode} needs --llm (without it the answer is extractive)")
    if (args.llm is None) != (args.model is None):
        raise ValueError("--llm and --model go together")
    retriever = Retriever(Collection.open(args.collection))
    filters = {name: getattr(args, name) for name in FILTER_OPTIONS if getattr(args, name) is not None}
    if args.llm is None:
        ans = Answerer(retriever, None, k=args.k).answer(args.question, qtype=args.qtype,
                                                         deadline_ms=args.deadline_ms, **filters)
    else:
        from ..generation.llm import OpenAIBackend

        with OpenAIBackend(args.llm, args.model, timeout_s=args.timeout_s) as backend:
            answerer = Answerer(retriever, backend, mode=args.mode, k=args.k, max_tokens=args.max_tokens)
            ans = answerer.answer(args.question, qtype=args.qtype, deadline_ms=args.deadline_ms, **filters)
    if args.json:
        print(json.dumps(ans.to_dict(), indent=2, ensure_ascii=False, default=str))
    else:
        print(format_answer(ans, verbose=args.verbose, all_sources=args.all_sources))
    if ans.error:
        print(f"medretrieve answer: {ans.error}", file=sys.stderr)
        return 1
    return 0


def format_answer(ans: Any, width: int = 100, verbose: bool = False, all_sources: bool = False) -> str:
    """An answer for a person: the answer, why there is none, its exact answer, its sources (the cited ones and
    those scoring at least the answerer's floor, ``Answer.shown_sources``; every source with ``all_sources``),
    numbered as the answer cites them, with their document's year and publication types where recorded and the
    score the evidence is ranked by; unsupported sentences; notes and
    timings with ``verbose``."""
    import textwrap

    lines = [textwrap.fill(f"A: {ans.text or '(no answer)'}", width, subsequent_indent="   ")]
    if ans.abstained:
        lines.append(f"   (no answer: {ans.abstain_reason})")
    if ans.error:
        lines.append(f"   (failed: {ans.error})")
    if ans.exact_answer is not None:
        lines.append(f"Exact answer: {ans.exact_answer}")
    offered = ans.evidence[:ans.sources_used or len(ans.evidence)]
    numbers = list(range(1, len(offered) + 1))
    if not all_sources and getattr(ans, "shown_sources", None) is not None and (ans.shown_sources or ans.citations
                                                                                 or ans.abstained):
        numbers = [n for n in ans.shown_sources if 1 <= n <= len(offered)]
    if numbers:
        lines.append("Sources (cited, or scoring at least the relevance floor):" if len(numbers) < len(offered)
                     else "Sources:")
        for n in numbers:
            h = offered[n - 1]
            where = " > ".join(str(p) for p in (field_of(h, "title"), field_of(h, "section")) if p)
            facts = source_facts(field_of(h, "metadata"))
            about = "; ".join(str(facts[key]) if key == "year" else ", ".join(facts[key]) for key in facts)
            score = field_of(h, "score")
            lines.append(f"  [{n}] {field_of(h, 'document_id', '')} {where}" + (f" [{about}]" if about else "")
                         + (f" ({score_label(field_of(h, 'scores') or {}, score, field_of(h, 'placed_by'))})"
                            if isinstance(score, (int, float)) else ""))
    if len(numbers) < len(offered):
        lines.append(f"  ({len(offered) - len(numbers)} more retrieved, not cited and below the relevance floor: "
                     "--all-sources lists them)")
    bad = ans.unsupported
    if bad:
        lines.append("Unsupported sentences:")
        lines.extend(f"  - {c.sentence}  ({c.reason})" for c in bad)
    if verbose:
        lines.extend(f"Note: {note}" for note in ans.notes)
        lines.append("Timings (ms): " + ", ".join(f"{k} {v:.1f}" for k, v in ans.timings.items()))
    return "\n".join(lines)
