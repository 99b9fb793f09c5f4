"""``medretrieve search``: one question against a collection, printed for a person or as JSON."""
from __future__ import annotations

import argparse
import json
from typing import Any

from ..retrieval.results import SearchResult


def add_search(sub: Any) -> None:
    p = sub.add_parser("search", help="search a collection", formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("collection", help="collection directory (medretrieve build)")
    p.add_argument("question")
    p.add_argument("--k", type=int, default=10, help="hits to return")
    p.add_argument("--deadline-ms", type=deadline, default=300.0, help="time budget in ms ('none': no deadline)")
    p.add_argument("--cross-encoder", default=None, help="cross-encoder model directory")
    p.add_argument("--training", nargs="*", default=None, help="BioASQ golden files for training-memory expansion")
    p.add_argument("--ranker", type=ranker_arg, default="default", help=RANKER_HELP)
    p.add_argument("--query-encoder", default=None,
                   help="query encoder directory replacing the collection's (medretrieve fit-query-encoder)")
    p.add_argument("--encoder", default=None,
                   help="encoder directory replacing the collection's own (e.g. for a collection built before "
                        "collections held their models)")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.set_defaults(func=_search)


def deadline(text: str) -> Any:
    """A ``--deadline-ms`` value: milliseconds, or ``none`` for no deadline."""
    if text.strip().lower() == "none":
        return None
    value = float(text)
    if not value >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0 ms or 'none', got {text!r}")
    return value


RANKER_HELP = ("learned ranker: 'default' (the one shipped with medretrieve, fitted on the public BioASQ 7b and 12b "
               "files), 'none' (heuristic rerank), or a ranker JSON (medretrieve fit-ranker)")


def ranker_arg(text: str) -> Any:
    """A ``--ranker`` value: ``none`` for no learned ranker, else ``default`` or a JSON path as given."""
    return None if text.strip().lower() == "none" else text


def format_result(res: SearchResult, width: int = 160, stages: bool = True) -> str:
    """A search result for a person: the question, then each hit with its relevance score and text."""
    lines = [f"Q: {res.question}", f"   type={res.query_type} intent={res.intent} weak={res.weak}"
             + (f" ({'; '.join(res.weak_reasons)})" if res.weak else "") + f" recovered={res.recovered}"
             + f" total={res.timings_ms.get('total', 0):.1f} ms"]
    for i, h in enumerate(res.hits, 1):
        text = " ".join(h.text.split())
        lines.append(f"{i:3d}. [{h.score:.3f}] {h.document_id} {h.section or '-'} | {h.title[:60]}")
        lines.append(f"      {text[:width]}{'...' if len(text) > width else ''}")
    if stages:
        lines.append("   stages: " + ", ".join(
            f"{s.name}{'' if s.ran else '(skipped)'} {s.elapsed_ms:.1f}ms" for s in res.stages))
    return "\n".join(lines)


def _search(args: argparse.Namespace) -> int:
    from ..corpus.collection import Collection
    from ..retrieval.retriever import Retriever

    col = Collection.open(args.collection, encoder=args.encoder, query_encoder=args.query_encoder)
    ret = Retriever(col, cross_encoder=args.cross_encoder, training=args.training, ranker=args.ranker)
    res = ret.search(args.question, k=args.k, deadline_ms=args.deadline_ms)
    print(json.dumps(res.to_dict(), indent=2, default=str) if args.json else format_result(res))
    return 0
