"""``medretrieve search``: one question against a collection, printed for a person or as JSON."""
from __future__ import annotations

import argparse
import json
from typing import Any, Callable, Dict, Iterable, Optional

from .options import RANKER_HELP, HelpFormatter, ranker_arg
from ..retrieval.results import SearchResult
from ..wire import DEFAULT_DEADLINE_MS, SEARCH_OPTIONS, SearchOption, check_search_options


def add_search(sub: Any) -> None:
    from .pubmed import add_pubmed_options

    p = sub.add_parser("search", help="search a collection (and PubMed with --pubmed)",
                       formatter_class=HelpFormatter,
                       usage="medretrieve search [COLLECTION] QUESTION [options]")
    p.add_argument("target", nargs="+", metavar="ARG",
                   help="collection directory (medretrieve build) and the question; with --pubmed the collection "
                        "may be left out (then give --encoder)")
    add_search_options(p)
    p.add_argument("--cross-encoder", default=None, help="cross-encoder model directory")
    p.add_argument("--training", nargs="*", default=None, help="BioASQ golden files for training-memory expansion")
    p.add_argument("--ranker", type=ranker_arg, default="default", help=RANKER_HELP)
    p.add_argument("--query-encoder", default=None,
                   help="query encoder directory replacing the collection's (medretrieve fit-query-encoder)")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON (SearchResult.to_dict())")
    p.add_argument("--pubmed", action="store_true",
                   help="add the question's PubMed articles (E-utilities) to the candidates; give --deadline-ms "
                        "room for the PubMed calls (e.g. 'none')")
    p.add_argument("--encoder", default=None,
                   help="encoder directory ('default' / 'minilm': an embedded model): with --pubmed and no "
                        "collection, the one to encode PubMed's articles; with a collection, one replacing the collection's own (e.g. "
                        "for a collection built before collections held their models)")
    add_pubmed_options(p)
    p.set_defaults(func=_search)


def add_search_options(p: argparse.ArgumentParser, names: Optional[Iterable[str]] = None) -> None:
    """The search request's options as flags, built from its one declaration (:data:`medretrieve.wire.SEARCH_OPTIONS`):
    ``--k``, ``--deadline-ms`` (``none``: no deadline), ``--per-document``, ``--sections NAME ...`` and
    ``--where FILTER``, ``--include-retracted`` and ``--STAGE`` / ``--no-STAGE`` for each stage switch. A flag not given is the retriever's setting; a value the
    declaration refuses is a usage error (exit 2) naming the flag. ``names``: only these options (None: all)."""
    chosen = None if names is None else set(names)
    for option in SEARCH_OPTIONS.values():
        if chosen is not None and option.name not in chosen:
            continue
        flag = "--" + option.name.replace("_", "-")
        unit = f" ({option.unit})" if option.unit and option.unit not in option.description else ""
        if option.stage:
            p.add_argument(flag, dest=option.name, action=argparse.BooleanOptionalAction, default=None,
                           help=f"the {option.name} stage, {option.description}; not given: the retriever's setting")
        elif option.type == "array":
            p.add_argument(flag, dest=option.name, nargs="+", metavar="NAME", type=_option_value(option),
                           help=f"{option.description}: of {', '.join(option.items or ())}")
        elif option.type == "filter":
            p.add_argument(flag, dest=option.name, metavar="FILTER", type=_option_value(option), default=None,
                           help="metadata filter every hit must pass, e.g. 'year >= 2015 and publication_type in "
                                "(Review, \"Randomized Controlled Trial\") and not retracted' (fields: the "
                                "collection's metadata; docs/retrieval.md)")
        elif option.type == "boolean":
            p.add_argument(flag, dest=option.name, action=argparse.BooleanOptionalAction, default=None,
                           help=f"{option.description}")
        elif option.name == "deadline_ms":
            p.add_argument(flag, dest=option.name, type=_option_value(option), default=DEFAULT_DEADLINE_MS,
                           help=f"time budget{unit} ('none': no deadline)")
        else:
            default = "" if option.default is None else f"; default {option.default}"
            p.add_argument(flag, dest=option.name, type=_option_value(option), default=None,
                           help=f"{option.description}{unit}{default}")


def _option_value(option: SearchOption) -> Callable[[str], Any]:
    """The argparse type of one option's flag: the text read as the option's type, then checked by the declaration
    (an ``argparse.ArgumentTypeError`` with its message when refused: a usage error)."""
    def parse(text: str) -> Any:
        if option.name == "deadline_ms" and text.strip().lower() == "none":
            return None
        if option.type == "array":
            value: Any = [text]
        elif option.type == "filter":
            value = text
        else:
            try:  # an integer's flag may be written 5 or 5.0, as a JSON number may (the declaration decides)
                value = int(text) if text.strip().lstrip("+-").isdigit() else float(text)
            except ValueError:
                raise argparse.ArgumentTypeError(
                    f"{option.name} must be {'an integer' if option.type == 'integer' else 'a number'}, "
                    f"got {text!r}") from None
        try:
            checked = check_search_options({option.name: value})[option.name]
        except (TypeError, ValueError) as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return checked[0] if option.type == "array" else checked

    parse.__name__ = option.name  # argparse names the type in its messages
    return parse


def search_options(args: argparse.Namespace) -> Dict[str, Any]:
    """The search options the command line gave (:func:`add_search_options`' flags; not given: left out),
    checked together (``--no-dense --no-bm25`` is refused)."""
    given = {name: getattr(args, name) for name in SEARCH_OPTIONS if name != "deadline_ms"}
    checked = check_search_options(given)
    return {**checked, "deadline_ms": args.deadline_ms}


def score_label(scores: Dict[str, float], score: float, placed_by: Optional[str] = None) -> str:
    """What a hit's score is, so a listing explains its order: a hit another stage put in its place (``placed_by``:
    recovery's second search for a weak question) is said to be there for that reason, with no score of another
    scale; the others show the score the list is ordered by (rerank, or RRF without reranking)."""
    if placed_by or "recovery" in scores:
        return "added by a second search: the first found little"
    return f"{'rerank' if 'rerank' in scores or 'cross_encoder' in scores else 'rrf'} {score:.3f}"


def format_result(res: SearchResult, width: int = 160, stages: bool = True) -> str:
    """A search result for a person: the question, then each hit with the score its place comes from (module
    :func:`score_label`) and its text."""
    evidence = f"weak evidence ({'; '.join(res.weak_reasons)})" if res.weak else "good evidence"
    lines = [f"Q: {res.question}", f"   a {res.query_type} question; {evidence}; "
             f"searched in {res.timings_ms.get('total', 0):.1f} ms"]
    if res.recovered:
        lines.append(f"   {res.recovery.get('replaced', 0)} hit(s) added by a second search, in place of ones that "
                     "matched the question poorly")
    for i, h in enumerate(res.hits, 1):
        text = " ".join(h.text.split())
        lines.append(f"{i:3d}. [{score_label(h.scores, h.score, h.placed_by)}] {h.document_id} {h.section or '-'} "
                     f"| {h.title[:60]}")
        lines.append(f"      {text[:width]}{'...' if len(text) > width else ''}")
    if stages:
        lines.append("   stages: " + ", ".join(
            f"{s.name}{'' if s.ran else '(skipped)'} {s.elapsed_ms:.1f}ms" for s in res.stages))
    return "\n".join(lines)


def _search(args: argparse.Namespace) -> int:
    from ..retrieval.retriever import Retriever
    from .pubmed import online_stage

    if len(args.target) > 2:
        raise ValueError("give COLLECTION QUESTION (quote a question of several words)")
    if len(args.target) == 1 and not args.pubmed:
        raise ValueError(missing_search_argument(args.target[0]))
    online = online_stage(args) if args.pubmed else None
    col = open_collection(args.target[0] if len(args.target) == 2 else None, args)
    ret = Retriever(col, cross_encoder=args.cross_encoder, training=args.training, ranker=args.ranker,
                    online=online)
    res = ret.search(args.target[-1], **search_options(args))
    print(json.dumps(res.to_dict(), indent=2, default=str) if args.json else format_result(res))
    return 0


def missing_search_argument(given: str) -> str:
    """What ``search`` with one argument lacks, in CLI terms: a folder is a collection without its question;
    anything else is a question without its collection."""
    import shlex
    from pathlib import Path

    if Path(given).is_dir():
        return f"missing the QUESTION after the collection: medretrieve search {shlex.quote(given)} 'QUESTION'"
    return (f"missing the COLLECTION before the question: medretrieve search COLLECTION {shlex.quote(given)} "
            "(COLLECTION: a folder made by medretrieve build), or add --pubmed --encoder default to search PubMed "
            "alone")


def open_collection(directory: Any, args: argparse.Namespace) -> Any:
    """The collection searched: a built one, or (PubMed only) an empty in-memory one over ``--encoder``."""
    from ..corpus.collection import Collection
    from ..corpus.memory import MemoryCollection
    from .build import encoder_dir

    if directory is not None:
        return Collection.open(directory, encoder=encoder_dir(args.encoder) if args.encoder else None,
                               query_encoder=getattr(args, "query_encoder", None))
    if not args.pubmed:
        raise ValueError("give a COLLECTION to search (or --pubmed --encoder DIR to search PubMed alone)")
    if not args.encoder:
        raise ValueError("a PubMed-only search needs --encoder (a model directory, or 'default')")
    return MemoryCollection.from_encoders(encoder_dir(args.encoder), getattr(args, "query_encoder", None))
