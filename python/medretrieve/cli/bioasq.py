"""``medretrieve bioasq run | strip | score``: BioASQ Task B as a participant runs it.

``run BATCH.json --phase A|A+|B --out DIR`` turns a test batch (questions with ``id``, ``body`` and ``type``) into
the submission file of that phase (``DIR/submission.json``), over a collection, over PubMed, or both; resumable
(a cache per question in ``DIR``), with a progress bar and a per-question log; ``--golden FILE`` scores the same
run. ``strip`` makes a test batch of a golden file (to rehearse a run); ``score`` scores any submission file.
Every stage of the retrieval pipeline is an option here; the defaults are the library's (``Settings``), which
keep a stage on only where the cross-year validation in bench/RESULTS.md shows it earns its place.
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path
from typing import Any

from .._files import read_json, write_json_atomic, write_text_atomic
from .llm_options import add_llm_options, backend_from_args, llm_given, model_label
from .options import RANKER_HELP, HelpFormatter, deadline, ranker_arg

PHASE_CHOICES = {"a": "A", "a+": "A+", "b": "B"}


def _phase(text: str) -> str:
    phase = PHASE_CHOICES.get(text.strip().lower())
    if phase is None:
        raise argparse.ArgumentTypeError(f"must be A, A+ or B, got {text!r}")
    return phase


def _retriever(args: argparse.Namespace, expansion_backend: Any) -> Any:
    """The retriever the options describe: the collection and/or PubMed, with the chosen stages."""
    from ..retrieval.retriever import Retriever
    from ..retrieval.settings import EXPANSION_KINDS
    from .pubmed import online_stage
    from .search import open_collection

    online = online_stage(args) if args.pubmed else None
    llm_terms = None
    if args.llm_expansion:
        from ..generation.terms import llm_synonyms

        llm_terms = llm_synonyms(expansion_backend, kind=args.llm_expansion)
    tuning: dict = {}
    if args.expansion_tables:
        tuning["expansions"] = EXPANSION_KINDS
    for name in ("mmr", "feedback"):
        if getattr(args, name) is not None:
            tuning[name] = getattr(args, name)
    return Retriever(open_collection(args.collection, args), cross_encoder=args.cross_encoder,
                     training=args.training or None, ranker=args.ranker, llm_terms=llm_terms, online=online,
                     **tuning)


def _config(args: argparse.Namespace) -> dict:
    """What the answers depend on besides BatchRun's own options (run.json)."""
    keys = ("collection", "pubmed", "encoder", "ranker", "training", "cross_encoder", "llm_expansion",
            "expansion_tables", "recovery", "sections", "mmr", "feedback", "deadline_ms", "backend", "retmax",
            "pubmed_queries", "pubmed_recovery")
    out = {k: getattr(args, k) for k in keys}
    out["model"] = model_label(args)
    return out


def _cmd_run(args: argparse.Namespace) -> int:
    from ..evaluation.bioasq.golden import load_bioasq
    from ..evaluation.bioasq.submissions import BatchRun
    from ..evaluation.evaluate import retriever_search_fn
    from ..generation.generate import write_bioasq_submission

    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {args.limit}")
    questions = load_bioasq(args.batch, golden=False)[:args.limit]
    searching = args.collection is not None or args.pubmed
    if args.phase == "B" and (searching or args.llm_expansion):
        raise ValueError("Phase B answers from the batch's snippets: give no --collection, --pubmed or "
                         "--llm-expansion")
    if args.phase != "B" and not searching:
        raise ValueError(f"Phase {args.phase} retrieves its evidence: give --collection DIR, --pubmed, or both")
    if args.llm_expansion and not llm_given(args):
        raise ValueError("--llm-expansion asks an LLM for terms: name one (--llm URL --model NAME, or --backend "
                         "and --model-path)")
    if args.phase == "A" and llm_given(args) and not args.llm_expansion:
        raise ValueError("Phase A writes no answers: an LLM is used there only with --llm-expansion")
    backend = backend_from_args(args, required=False)
    search = None
    if searching:
        options = {"recovery": args.recovery, "route": args.sections}
        search = retriever_search_fn(_retriever(args, backend), args.deadline_ms, options)
    run = BatchRun(args.out, args.phase, search, backend if args.phase != "A" else None, fetch_k=args.fetch_k,
                   prune=args.prune, prune_per_document=args.prune_per_document, max_tokens=args.max_tokens,
                   max_chars=args.max_chars, config=_config(args), progress=not args.no_progress)
    if not args.quiet:
        logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    out = Path(args.out)
    with run.holding():  # no other run of the folder between the answers and their submission
        result = run.run(questions)
        write_bioasq_submission(result.entries, out / "submission.json", system=args.system or "medretrieve",
                                phase=args.phase)
        print(f"{out / 'submission.json'}: phase {args.phase}, {len(result.entries)} of {len(questions)} questions "
              f"({result.answered} answered now, {result.cached} from the cache, {len(result.failures)} failed; "
              f"{result.elapsed_ms / 1000:.1f} s; per question: {out / 'log.jsonl'})")
        if args.golden:
            print(_score(result.entries, args.golden, out))
    return 1 if result.failures else 0


def _score(entries: list, golden: list, out: Path) -> str:
    """Scores of ``entries`` against the golden files, written to ``out`` (results.json, results.md)."""
    from ..evaluation.bioasq.golden import load_bioasq
    from ..evaluation.report import bioasq_markdown, retrieval_markdown
    from ..evaluation.bioasq.submissions import score_submission

    scores = score_submission(entries, load_bioasq(golden))
    out.mkdir(parents=True, exist_ok=True)
    write_json_atomic(out / "results.json", {"golden": [str(g) for g in golden], **scores})
    md = ""
    if "retrieval" in scores:
        md += retrieval_markdown(scores["retrieval"], label=f"{scores['count']} questions")
    if "answers" in scores:
        md += ("\n" if md else "") + bioasq_markdown(scores["answers"])
    if scores["missing"]:
        md += f"\n{len(scores['missing'])} golden questions are not in the submission\n"
    write_text_atomic(out / "results.md", md)
    return md


def _cmd_score(args: argparse.Namespace) -> int:
    data = read_json(args.submission)
    if not isinstance(data, dict) or not isinstance(data.get("questions"), list):
        raise ValueError(f"{args.submission}: not a BioASQ submission (no 'questions' list)")
    print(_score(data["questions"], args.golden, Path(args.out)))
    return 0


def _cmd_strip(args: argparse.Namespace) -> int:
    from ..evaluation.bioasq.golden import load_bioasq
    from ..evaluation.bioasq.submissions import strip_batch

    out = Path(args.output)
    if out.exists() and not args.overwrite:
        raise FileExistsError(f"{out} exists; pass --overwrite to replace it")
    load_bioasq(args.golden, golden=False)  # every question checked (ids, types, snippets): no broken batch out
    batch = strip_batch(read_json(args.golden), args.phase)
    write_text_atomic(out, json.dumps(batch, ensure_ascii=False, indent=1))
    print(f"{out}: {len(batch['questions'])} questions as a phase {args.phase} test batch")
    return 0


def _stage_options(p: argparse.ArgumentParser) -> None:
    """Every stage of the pipeline as an option (defaults: the library's, see Settings)."""
    g = p.add_argument_group("retrieval stages (defaults as bench/RESULTS.md's cross-year validation chose them)")
    g.add_argument("--ranker", type=ranker_arg, default="default", help=RANKER_HELP)
    g.add_argument("--training", nargs="+", default=None, metavar="FILE",
                   help="BioASQ golden files of earlier years: similar-question memory (terms of the documents "
                        "of the most similar training questions expand the query)")
    g.add_argument("--llm-expansion", choices=("synonyms", "relations"), default=None,
                   help="ask the LLM (the --backend options) for synonym or relation terms of each question")
    g.add_argument("--expansion-tables", action="store_true",
                   help="also expand with the static abbreviation and relation tables (off by default: they lost "
                        "document MAP on 12b)")
    g.add_argument("--cross-encoder", default=None, metavar="DIR",
                   help="cross-encoder folder blended into the rerank (medretrieve export-onnx --kind cross, "
                        "fit-cross-encoder)")
    g.add_argument("--prune", type=int, default=None, metavar="N",
                   help="snippets submitted and shown to the LLM: the best N hits, near-duplicates dropped "
                        "(default: the first 10 hits)")
    g.add_argument("--prune-per-document", type=int, default=None, metavar="M",
                   help="with --prune: at most M snippets of one article (default: N)")
    g.add_argument("--recovery", action=argparse.BooleanOptionalAction, default=None,
                   help="weak-question recovery (extra queries that replace weak hits only; default: the "
                        "retriever's setting, Settings.recovery: off over a local collection, where it was measured "
                        "to change nothing, on over PubMed)")
    g.add_argument("--sections", action=argparse.BooleanOptionalAction, default=True,
                   help="section routing: treatment / symptom / test questions search those sections first")
    g.add_argument("--mmr", action=argparse.BooleanOptionalAction, default=None,
                   help="MMR diversification of the hits (default: off, Settings.mmr)")
    g.add_argument("--feedback", action=argparse.BooleanOptionalAction, default=None,
                   help="pseudo-relevance feedback (default: only without a learned ranker, Settings.feedback)")
    g.add_argument("--fetch-k", type=int, default=30,
                   help="hits asked per question (the 10 documents are the first 10 distinct ones among them)")
    g.add_argument("--deadline-ms", type=deadline, default=None,
                   help="retrieval time budget per question (ms; default: none, a batch has hours)")


def add_bioasq(subparsers: Any) -> None:
    """Register ``medretrieve bioasq run | strip | score``."""
    from .pubmed import add_pubmed_options

    parser = subparsers.add_parser("bioasq", help="BioASQ Task B as a participant: a test batch to the submission "
                                                  "file of phase A, A+ or B", formatter_class=HelpFormatter)
    sub = parser.add_subparsers(dest="bioasq_command", metavar="{run,strip,score}")
    sub.required = True

    p = sub.add_parser("run", help="answer a test batch: the submission JSON of phase A, A+ or B",
                       formatter_class=HelpFormatter,
                       description="Phase A: documents (PubMed URLs, rank order) and snippets with their offsets; "
                                   "A+: those and exact + ideal answers from them; B: answers from the batch's "
                                   "snippets. Answers are written by an LLM (--llm/--backend), else extracted.")
    p.add_argument("batch", metavar="BATCH.json", help="the test batch (a golden file is read as one too)")
    p.add_argument("--phase", type=_phase, required=True, help="A, A+ or B")
    p.add_argument("--out", required=True, help="run folder: submission.json, the per-question cache "
                                                "(a rerun resumes), log.jsonl, results of --golden")
    p.add_argument("--collection", default=None, metavar="DIR", help="collection folder (medretrieve build)")
    p.add_argument("--pubmed", action="store_true",
                   help="PubMed online (E-utilities) as a candidate source; with --collection both are fused")
    p.add_argument("--encoder", default=None,
                   help="with --pubmed and no collection: the encoder of PubMed's articles ('default' or a folder)")
    p.add_argument("--golden", nargs="+", default=None, metavar="FILE",
                   help="golden file(s) to score the run with (doc / snippet MAP@10, exact answers, ROUGE)")
    p.add_argument("--limit", type=int, default=None, help="only the first N questions")
    p.add_argument("--system", default=None, help="system name in the submission file (default: medretrieve)")
    p.add_argument("--max-tokens", type=int, default=512, help="most tokens the LLM writes per answer")
    p.add_argument("--max-chars", type=int, default=1500, help="characters of each snippet shown to the LLM")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--quiet", action="store_true", help="no per-question failure messages on stderr")
    _stage_options(p)
    add_llm_options(p, workers=False)
    add_pubmed_options(p)
    p.set_defaults(func=_cmd_run)

    p = sub.add_parser("strip", help="a golden file as a test batch (id, body, type; phase B: and the snippets)",
                       formatter_class=HelpFormatter)
    p.add_argument("golden", help="BioASQ golden JSON file")
    p.add_argument("output", help="test batch JSON to write")
    p.add_argument("--phase", type=_phase, default="A", help="A / A+ (questions only) or B (with the snippets)")
    p.add_argument("--overwrite", action="store_true", help="replace OUTPUT if it exists")
    p.set_defaults(func=_cmd_strip)

    p = sub.add_parser("score", help="score a submission file against golden files", formatter_class=HelpFormatter)
    p.add_argument("submission", help="submission JSON (medretrieve bioasq run, or any system's)")
    p.add_argument("--golden", nargs="+", required=True, metavar="FILE", help="golden file(s)")
    p.add_argument("--out", required=True, help="folder for results.json and results.md")
    p.set_defaults(func=_cmd_score)
