"""``medretrieve answer``: retrieve evidence and answer with an OpenAI-compatible LLM, citing numbered sources."""
from __future__ import annotations

import json
import sys
from typing import Any

from ..generation.generate import MODES, field_of
from ..generation.prompts import BIOASQ_TYPES


def add_answer(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "answer",
        help="answer a question from a collection with an OpenAI-compatible LLM, citing sources",
        description="Retrieve evidence from COLLECTION_DIR and answer QUESTION with the LLM at --llm, "
        "citing numbered sources and checking each citation.",
    )
    p.add_argument("collection", metavar="COLLECTION_DIR", help="collection folder (medretrieve build)")
    p.add_argument("question", help="the question to answer")
    p.add_argument("--llm", required=True, metavar="BASE_URL", help="OpenAI-compatible API root, e.g. http://127.0.0.1:8000/v1")
    p.add_argument("--model", required=True, help="model name the server knows")
    p.add_argument("--mode", choices=MODES, default="cite", help="cite (default), answer_only or bioasq")
    p.add_argument("--qtype", choices=BIOASQ_TYPES, default=None, help="ask for an exact answer of this BioASQ type")
    p.add_argument("--k", type=int, default=10, help="evidence passages to retrieve (default 10)")
    p.add_argument("--deadline-ms", type=float, default=None, help="time budget for the whole answer (ms)")
    p.add_argument("--max-tokens", type=int, default=512, help="most tokens the LLM may write (default 512)")
    p.add_argument("--timeout-s", type=float, default=60.0, help="per-request LLM timeout (s, default 60)")
    p.add_argument("--json", action="store_true", help="print the full answer as JSON")
    p.set_defaults(func=_answer)


def _answer(args: Any) -> int:
    from ..corpus.collection import Collection
    from ..generation.generate import Answerer
    from ..generation.llm import OpenAIBackend
    from ..retrieval.retriever import Retriever

    collection = Collection.open(args.collection)
    with OpenAIBackend(args.llm, args.model, timeout_s=args.timeout_s) as backend:
        answerer = Answerer(Retriever(collection), backend, mode=args.mode, k=args.k, max_tokens=args.max_tokens)
        ans = answerer.answer(args.question, qtype=args.qtype, deadline_ms=args.deadline_ms)
    if args.json:
        print(json.dumps(ans.to_dict(), indent=2, ensure_ascii=False, default=str))
    else:
        _print_answer(ans)
    if ans.error:
        print(f"medretrieve answer: {ans.error}", file=sys.stderr)
        return 1
    return 0


def _print_answer(ans: Any) -> None:
    print(ans.text or "(no answer)")
    if ans.exact_answer is not None:
        print(f"\nExact answer: {ans.exact_answer}")
    if ans.abstained:
        print(f"\nAbstained: {ans.abstain_reason}")
    for note in ans.notes:
        print(f"\nNote: {note}")
    if ans.evidence:
        print("\nSources:")
        for n, h in enumerate(ans.evidence, 1):
            title = field_of(h, "title") or ""
            print(f"  [{n}] {field_of(h, 'document_id', '')} {title}".rstrip())
    bad = ans.unsupported
    if bad:
        print("\nUnsupported sentences:")
        for c in bad:
            print(f"  - {c.sentence}  ({c.reason})")
    t = ans.timings
    print("\nTimings (ms): " + ", ".join(f"{k} {v:.0f}" for k, v in t.items()))
