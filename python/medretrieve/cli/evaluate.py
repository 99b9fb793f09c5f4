"""``medretrieve eval retrieval | bioasq | medrgb | report``: evaluation runs with JSON results, markdown, plots."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Optional, Sequence

from .._files import read_json, write_json_atomic, write_text_atomic
from ..evaluation import evaluate as E
from ..evaluation.bioasq import answers as A
from ..evaluation.bioasq.golden import load_bioasq
from ..evaluation.medrgb import N_VALUES, P_VALUES, SCENARIOS, STANDARD_N, MedRGBRunner, make_settings
from ..evaluation.report import bioasq_markdown
from ..generation.generate import write_bioasq_submission
from .llm_options import add_llm_options, backend_from_args, model_label, workers_for
from .options import RANKER_HELP, HelpFormatter, deadline, ranker_arg


def parse_search_options(pairs: Optional[Sequence[str]]) -> dict[str, Any]:
    """``["bm25=false", "per_document=2"]`` -> ``{"bm25": False, "per_document": 2}``.

    Values: true/false, none, integers, floats, else the string.
    """
    out: dict[str, Any] = {}
    for pair in pairs or []:
        key, sep, raw = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key.isidentifier():
            raise ValueError(f"--search-option {pair!r} must look like NAME=VALUE (e.g. bm25=false)")
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


def _limit(items: list, limit: Optional[int]) -> list:
    if limit is not None and limit < 1:
        raise ValueError(f"--limit must be >= 1, got {limit}")
    return items[:limit] if limit else items


def _search_fn(args: argparse.Namespace, options: Optional[dict] = None) -> Any:
    """``search_fn`` over the collection, or (``--pubmed``) over it and PubMed, or PubMed alone."""
    if not args.pubmed:
        if args.collection is None:
            raise ValueError("give a COLLECTION (or --pubmed to retrieve from PubMed)")
        return E.open_search_fn(args.collection, args.deadline_ms, options, args.ranker)
    from ..retrieval.retriever import Retriever
    from .pubmed import online_stage
    from .search import open_collection

    online = online_stage(args)
    retriever = Retriever(open_collection(args.collection, args), ranker=args.ranker, online=online)
    return E.retriever_search_fn(retriever, args.deadline_ms, options)


def _cmd_retrieval(args: argparse.Namespace) -> int:
    questions = _limit(load_bioasq(args.bioasq), args.limit)
    options = parse_search_options(args.search_option)
    if args.ranker_folds:
        if args.ranker not in (None, "default") or args.pubmed:
            raise ValueError("--ranker-folds goes with neither --ranker nor --pubmed")
        search = E.fold_ranker_search_fn(args.collection, questions, args.deadline_ms, options)
    else:
        search = _search_fn(args, options)
    result = E.evaluate_retrieval(search, questions, k=args.k, fetch_k=args.fetch_k, progress=not args.no_progress)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = {"collection": str(args.collection), "pubmed": bool(args.pubmed),
            "bioasq": [str(p) for p in args.bioasq], "deadline_ms": args.deadline_ms,
            "fetch_k": args.fetch_k or 3 * args.k, "search_options": options,
            "ranker": "leave-one-file-out" if args.ranker_folds else args.ranker, **result.to_dict()}
    write_json_atomic(out / "results.json", data)
    if args.submission:  # BioASQ Phase A: documents and snippets with their offsets
        write_bioasq_submission(A.phase_a_entries(data), args.submission, system=args.system or "medretrieve",
                                phase="A")
    md = E.retrieval_markdown_for(data)
    write_text_atomic(out / "results.md", md)
    print(md)
    return 0


def _cmd_bioasq(args: argparse.Namespace) -> int:
    questions = _limit(load_bioasq(args.bioasq), args.limit)
    phase = args.phase.upper()
    if phase == "B" and (args.collection or args.pubmed):
        raise ValueError("Phase B answers from the golden file's snippets: give no collection and no --pubmed")
    search = _search_fn(args) if phase == "A+" else None
    backend = backend_from_args(args)
    answer_fn = A.make_bioasq_answer_fn(search, backend, k=args.k, phase=phase)
    result = A.evaluate_bioasq_answers(answer_fn, questions, max_workers=workers_for(backend, args.workers),
                                       progress=not args.no_progress)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = {"collection": str(args.collection), "pubmed": bool(args.pubmed), "phase": phase,
            "model": model_label(args), **result}
    write_json_atomic(out / "results.json", data)

    # BioASQ submission format (exact + ideal answers; in Phase A+ the evidence too) for the official scorer
    write_bioasq_submission(A.submission_entries(questions, result), out / "submission.json",
                            system=args.system or model_label(args), phase=phase)
    md = bioasq_markdown(data)
    write_text_atomic(out / "results.md", md)
    print(md)
    return 0 if not result["errors"] else 1


def _grid(args: argparse.Namespace) -> tuple:
    """(scenarios, n, p, standard n) from the options; ``--grid``: every setting of the MedRGB protocol."""
    given = [name for name in ("scenarios", "n", "p", "standard_n") if getattr(args, name) is not None]
    if args.grid and given:
        raise ValueError(f"--grid runs every setting; leave out --{', --'.join(g.replace('_', '-') for g in given)}")
    if args.grid:  # standard RAG at every n too, beside the no-retrieval baseline
        return SCENARIOS, N_VALUES, P_VALUES, tuple(sorted({0, *N_VALUES}))
    return (args.scenarios or SCENARIOS, args.n or N_VALUES, args.p if args.p is not None else P_VALUES,
            args.standard_n if args.standard_n is not None else STANDARD_N)


def _judge(args: argparse.Namespace) -> tuple:
    """(judge backend, judge model name): a separate LLM when --judge-llm / --judge-model say so."""
    if args.judge_llm is None and args.judge_model is None:
        return None, ""
    if args.no_judge:
        raise ValueError("--judge-llm / --judge-model go without --no-judge")
    from ..generation.llm import OpenAIBackend

    url = args.judge_llm or args.llm
    model = args.judge_model or args.model
    if url is None or model is None:
        raise ValueError("a judge server needs --judge-llm URL and --judge-model NAME (the model under test is "
                         "not a server to borrow them from)")
    if args.backend == "openai" and (url, model) == (args.llm, args.model):
        raise ValueError("the judge named by --judge-llm / --judge-model is the model under test; leave both out "
                         "to judge with it")
    return OpenAIBackend(url, model, api_key=args.judge_api_key or args.api_key, timeout_s=args.timeout_s), model


def _cmd_medrgb(args: argparse.Namespace) -> int:
    datasets = E.load_datasets(args.dataset, args.limit)
    settings = make_settings(*_grid(args))
    search = E.open_search_fn(args.collection, args.deadline_ms, ranker=args.ranker)
    backend = backend_from_args(args)
    judge_backend, judge_model = _judge(args)
    out = Path(args.out)
    runs = []
    for kind, questions in datasets:
        runner = MedRGBRunner(
            backend, search, out / kind, dataset=kind, model=model_label(args), collection=str(args.collection),
            seed=args.seed, max_workers=workers_for(backend, args.workers), judge=not args.no_judge,
            progress=not args.no_progress,
            judge_backend=judge_backend, judge_model=judge_model, max_tokens=args.max_tokens,
            doc_max_chars=args.doc_max_chars,
        )
        run = runner.run(questions, settings)
        runs.append({"label": args.label or model_label(args), **run.to_dict()})
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
    parser = subparsers.add_parser("eval", help="evaluate retrieval (BioASQ), answers (BioASQ) or MedRGB scenarios",
                                   formatter_class=HelpFormatter)
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

    def retrieval_source(p: argparse.ArgumentParser) -> None:
        from .pubmed import add_pubmed_options

        p.add_argument("collection", nargs="?", default=None,
                       help="collection folder (medretrieve build); may be left out with --pubmed")
        p.add_argument("--pubmed", action="store_true",
                       help="online: add each question's PubMed articles (E-utilities) to the candidates; give "
                            "--deadline-ms room for the PubMed calls (e.g. 'none')")
        p.add_argument("--encoder", default=None,
                       help="with --pubmed and no collection: encoder directory, or 'default'")
        p.add_argument("--system", default=None, help="system name in the submission file")
        add_pubmed_options(p)

    p = sub.add_parser("retrieval", help="BioASQ document/snippet MAP@k, recall@k, nDCG@k of a collection", formatter_class=HelpFormatter)
    retrieval_source(p)
    p.add_argument("--submission", default=None, metavar="OUT.json",
                   help="also write a BioASQ Phase A submission (documents and snippets with offsets)")
    p.add_argument("--bioasq", nargs="+", required=True, help="BioASQ golden JSON file(s)")
    p.add_argument("--k", type=int, default=10, help="cut-off (BioASQ: 10)")
    p.add_argument("--fetch-k", type=int, default=None, help="hits asked from the retriever (default 3*k)")
    p.add_argument("--search-option", action="append", metavar="NAME=VALUE",
                   help="extra Retriever.search keyword, repeatable (e.g. bm25=false for dense only)")
    p.add_argument("--ranker-folds", action="store_true",
                   help="learned ranker per file, fitted on the other files' questions (leave-one-file-out)")
    common(p)
    p.set_defaults(func=_cmd_retrieval)

    p = sub.add_parser("bioasq", help="BioASQ answers (Phase A+: retrieved evidence; Phase B: gold snippets): "
                                      "exact-answer metrics, ROUGE and a submission file", formatter_class=HelpFormatter)
    retrieval_source(p)
    p.add_argument("--phase", default="a+", choices=("a+", "b"),
                   help="a+: retrieve the evidence (COLLECTION and/or --pubmed); b: the golden file's snippets")
    p.add_argument("--bioasq", nargs="+", required=True, help="BioASQ golden JSON file(s)")
    p.add_argument("--k", type=int, default=10, help="snippets given to the LLM")
    add_llm_options(p)
    common(p)
    p.set_defaults(func=_cmd_bioasq)

    p = sub.add_parser("medrgb", help="MedRGB scenarios (standard, sufficiency, integration, robustness)", formatter_class=HelpFormatter)
    p.add_argument("--dataset", nargs="+", action="extend", required=True,
                   help="KIND:PATH with KIND mmlu_med (folder), medqa (JSONL), pubmedqa (JSON), bioasq (golden JSON)")
    p.add_argument("--collection", required=True, help="collection folder the signal documents come from")
    p.add_argument("--scenarios", nargs="+", default=None, choices=list(SCENARIOS),
                   help=f"scenarios to run (default: all of {', '.join(SCENARIOS)})")
    p.add_argument("--p", nargs="+", type=int, default=None,
                   help=f"signal ratios (%%; default {' '.join(map(str, P_VALUES))})")
    p.add_argument("--n", nargs="+", type=int, default=None,
                   help=f"documents per context (default {' '.join(map(str, N_VALUES))})")
    p.add_argument("--standard-n", nargs="+", type=int, default=None,
                   help=f"documents for standard RAG, 0 = the no-retrieval baseline (default "
                        f"{' '.join(map(str, STANDARD_N))})")
    p.add_argument("--grid", action="store_true",
                   help="the full protocol: every scenario at p in 0..100 (step 20) and n in 5, 10, 20, standard RAG "
                        "at n 0, 5, 10, 20; resumable from the --out caches")
    p.add_argument("--seed", type=int, default=0, help="seed of the random draws (noise documents, orders)")
    p.add_argument("--label", default=None, help="row name in the tables (default: the model name)")
    p.add_argument("--no-judge", action="store_true", help="skip the LLM judge of sub-answers")
    p.add_argument("--judge-llm", default=None,
                   help="OpenAI-compatible base URL of a judge LLM other than the model under test (default: --llm; "
                        "with a local --backend the judge is that model unless a judge server is named)")
    p.add_argument("--judge-model", default=None,
                   help="judge model name (default: --model; without --judge-llm / --judge-model the model under "
                        "test judges itself, and the report says so)")
    p.add_argument("--judge-api-key", default=None, help="API key of the judge server (default: --api-key)")
    p.add_argument("--max-tokens", type=int, default=1024, help="most tokens the model may write per reply")
    p.add_argument("--doc-max-chars", type=int, default=1500,
                   help="characters of each document shown to the model (small contexts: less)")
    add_llm_options(p)
    common(p)
    p.set_defaults(func=_cmd_medrgb)

    p = sub.add_parser("report", help="one MedRGB table set (rows: runs) from several medrgb results.json files", formatter_class=HelpFormatter)
    p.add_argument("results", nargs="+", help="results.json files written by 'medretrieve eval medrgb'")
    p.add_argument("--out", required=True, help="output folder (results.md, plots)")
    p.set_defaults(func=_cmd_report)
