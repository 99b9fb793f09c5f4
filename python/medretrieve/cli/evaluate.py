"""``medretrieve eval retrieval | bioasq | medrgb | report``: evaluation runs with JSON results, markdown, plots."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Optional, Sequence

from .._files import read_json, write_json_atomic, write_text_atomic
from ..evaluation.datasets import load_bioasq
from ..evaluation import evaluate as E
from ..evaluation.medrgb import MedRGBRunner, make_settings
from ..evaluation.report import bioasq_markdown
from ..generation.generate import write_bioasq_submission
from .search import RANKER_HELP, deadline, ranker_arg


def parse_search_options(pairs: Optional[Sequence[str]]) -> dict[str, Any]:
    """``["lexical=false", "per_document=2"]`` -> ``{"lexical": False, "per_document": 2}``.

    Values: true/false, none, integers, floats, else the string.
    """
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise ValueError(f"--search-option {pair!r} must look like NAME=VALUE (e.g. lexical=false)")
        if key in ("k", "deadline_ms"):
            raise ValueError(f"--search-option {key} is set by --k / --deadline-ms")
        low = raw.strip().lower()
        value: Any
        if low in ("true", "false"):
            value = low == "true"
        elif low == "none":
            value = None
        else:
            try:
                value = int(raw)
            except ValueError:
                try:
                    value = float(raw)
                except ValueError:
                    value = raw
        out[key] = value
    return out


def _backend(args: argparse.Namespace) -> Any:
    from ..generation.llm import OpenAIBackend

    return OpenAIBackend(args.llm, args.model, api_key=args.api_key, timeout_s=args.timeout_s)


def _limit(items: list, limit: Optional[int]) -> list:
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be >= 1, got {limit}")
    return items[:limit] if limit else items


def _cmd_retrieval(args: argparse.Namespace) -> int:
    questions = _limit(load_bioasq(args.bioasq), args.limit)
    options = parse_search_options(args.search_option)
    if args.ranker_folds:
        if args.ranker not in (None, "default"):
            raise ValueError("give either --ranker or --ranker-folds, not both")
        search = E.fold_ranker_search_fn(args.collection, questions, args.deadline_ms, options)
    else:
        search = E.open_search_fn(args.collection, args.deadline_ms, options, args.ranker)
    result = E.evaluate_retrieval(search, questions, k=args.k, fetch_k=args.fetch_k, progress=not args.no_progress)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = {"collection": str(args.collection), "bioasq": [str(p) for p in args.bioasq],
            "deadline_ms": args.deadline_ms, "fetch_k": args.fetch_k or 3 * args.k, "search_options": options,
            "ranker": "leave-one-file-out" if args.ranker_folds else args.ranker, **result.to_dict()}
    write_json_atomic(out / "results.json", data)
    md = E.retrieval_markdown_for(data)
    write_text_atomic(out / "results.md", md)
    print(md)
    return 0


def _cmd_bioasq(args: argparse.Namespace) -> int:
    questions = _limit(load_bioasq(args.bioasq), args.limit)
    search = E.open_search_fn(args.collection, args.deadline_ms, ranker=args.ranker)
    backend = _backend(args)
    answer_fn = E.make_bioasq_answer_fn(search, backend, k=args.k)
    result = E.evaluate_bioasq_answers(answer_fn, questions, max_workers=args.workers, progress=not args.no_progress)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = {"collection": str(args.collection), "model": args.model, **result}
    write_json_atomic(out / "results.json", data)

    # BioASQ submission format (exact + ideal answers, evidence documents) for the official scorer
    write_bioasq_submission(E.submission_entries(questions, result), out / "submission.json", system=args.model)
    md = bioasq_markdown(data)
    write_text_atomic(out / "results.md", md)
    print(md)
    return 0 if not result["errors"] else 1


def _cmd_medrgb(args: argparse.Namespace) -> int:
    datasets = E.load_datasets(args.dataset, args.limit)
    settings = make_settings(args.scenarios, args.n, args.p, args.standard_n)
    search = E.open_search_fn(args.collection, args.deadline_ms, ranker=args.ranker)
    backend = _backend(args)
    out = Path(args.out)
    runs = []
    for kind, questions in datasets:
        runner = MedRGBRunner(
            backend, search, out / kind, dataset=kind, model=args.model, collection=str(args.collection),
            seed=args.seed, max_workers=args.workers, judge=not args.no_judge, progress=not args.no_progress,
        )
        run = runner.run(questions, settings)
        runs.append({"label": args.label or args.model, **run.to_dict()})
    write_json_atomic(out / "results.json", {"runs": runs})
    print(E.write_medrgb_report(runs, out))
    return 0 if not any(r["errors"] for r in runs) else 1


def _cmd_report(args: argparse.Namespace) -> int:
    """Merge the runs of several ``eval medrgb`` results.json files into one set of tables and plots."""
    runs = []
    for path in args.results:
        data = read_json(Path(path))
        if not isinstance(data, dict) or not isinstance(data.get("runs"), list):
            raise ValueError(f"{path}: not the results.json of 'medretrieve eval medrgb' (no 'runs' list)")
        runs.extend(data["runs"])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    print(E.write_medrgb_report(runs, out))
    return 0


def add_eval(subparsers: Any) -> None:
    """Register ``medretrieve eval retrieval | bioasq | medrgb``."""
    parser = subparsers.add_parser("eval", help="evaluate retrieval (BioASQ), answers (BioASQ) or MedRGB scenarios")
    sub = parser.add_subparsers(dest="eval_command", metavar="{retrieval,bioasq,medrgb,report}")
    sub.required = True

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--out", required=True, help="output folder (results.json, results.md, plots, caches)")
        p.add_argument("--limit", type=int, default=None, help="only the first N questions (per dataset)")
        p.add_argument("--deadline-ms", type=deadline, default=300.0,
                       help="retrieval deadline per search (ms; 'none': no deadline)")
        p.add_argument("--no-progress", action="store_true", help="no progress bars")
        p.add_argument("--ranker", type=ranker_arg, default="default",
                       help=RANKER_HELP + "; on BioASQ 7b or 12b questions the default ranker saw them: use "
                       "--ranker-folds or another year to measure it")

    def llm(p: argparse.ArgumentParser) -> None:
        p.add_argument("--llm", required=True, help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1")
        p.add_argument("--model", required=True, help="model name sent to the server")
        p.add_argument("--api-key", default=None, help="API key (else MEDRETRIEVE_LLM_API_KEY / OPENAI_API_KEY)")
        p.add_argument("--timeout-s", type=float, default=60.0, help="per-request timeout (s)")
        p.add_argument("--workers", type=int, default=4, help="parallel LLM requests")

    p = sub.add_parser("retrieval", help="BioASQ document/snippet MAP@k, recall@k, nDCG@k of a collection")
    p.add_argument("collection", help="collection folder (medretrieve build)")
    p.add_argument("--bioasq", nargs="+", required=True, help="BioASQ golden JSON file(s)")
    p.add_argument("--k", type=int, default=10, help="cut-off (BioASQ: 10)")
    p.add_argument("--fetch-k", type=int, default=None, help="hits asked from the retriever (default 3*k)")
    p.add_argument("--search-option", action="append", metavar="NAME=VALUE",
                   help="extra Retriever.search keyword, repeatable (e.g. lexical=false for dense only)")
    p.add_argument("--ranker-folds", action="store_true",
                   help="learned ranker per file, fitted on the other files' questions (leave-one-file-out)")
    common(p)
    p.set_defaults(func=_cmd_retrieval)

    p = sub.add_parser("bioasq", help="BioASQ Phase A+ answers: exact-answer metrics and ROUGE")
    p.add_argument("collection", help="collection folder (medretrieve build)")
    p.add_argument("--bioasq", nargs="+", required=True, help="BioASQ golden JSON file(s)")
    p.add_argument("--k", type=int, default=10, help="snippets given to the LLM")
    llm(p)
    common(p)
    p.set_defaults(func=_cmd_bioasq)

    p = sub.add_parser("medrgb", help="MedRGB scenarios (standard, sufficiency, integration, robustness)")
    p.add_argument("--dataset", nargs="+", action="extend", required=True,
                   help="KIND:PATH with KIND mmlu_med (folder), medqa (JSONL), pubmedqa (JSON), bioasq (golden JSON)")
    p.add_argument("--collection", required=True, help="collection folder the signal documents come from")
    p.add_argument("--scenarios", nargs="+", default=["standard", "sufficiency", "integration", "robustness"],
                   choices=["standard", "sufficiency", "integration", "robustness"])
    p.add_argument("--p", nargs="+", type=int, default=[0, 20, 40, 60, 80, 100], help="signal ratios (%%)")
    p.add_argument("--n", nargs="+", type=int, default=[5, 10, 20], help="documents per context")
    p.add_argument("--standard-n", nargs="+", type=int, default=[5, 20], help="documents for standard RAG")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--label", default=None, help="row name in the tables (default: the model name)")
    p.add_argument("--no-judge", action="store_true", help="skip the LLM judge of integration sub-answers")
    llm(p)
    common(p)
    p.set_defaults(func=_cmd_medrgb)

    p = sub.add_parser("report", help="one MedRGB table set (rows: runs) from several medrgb results.json files")
    p.add_argument("results", nargs="+", help="results.json files written by 'medretrieve eval medrgb'")
    p.add_argument("--out", required=True, help="output folder (results.md, plots)")
    p.set_defaults(func=_cmd_report)
