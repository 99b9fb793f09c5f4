"""``medretrieve fit-ranker | fit-query-encoder | fit-encoder | fit-cross-encoder``: learn from training questions."""
from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..retrieval.learned_ranker import DEFAULT_L2
from .options import RANKER_HELP, HelpFormatter, ranker_arg


def add_fit_ranker(sub: Any) -> None:
    p = sub.add_parser("fit-ranker", help="fit a learned reranker on training questions (BioASQ golden files)",
                       formatter_class=HelpFormatter)
    p.add_argument("collection", help="collection directory (medretrieve build)")
    p.add_argument("training", nargs="+", help="BioASQ golden JSON files: questions with relevant documents")
    p.add_argument("-o", "--output", required=True, help="ranker JSON to write (use with search --ranker)")
    p.add_argument("--l2", type=float, default=DEFAULT_L2, help="L2 penalty on the standardised weights (strong by "
                   "default: the signals shift between collections, bench/RESULTS.md)")
    p.add_argument("--adapt-default", action="store_true",
                   help="adapt the shipped default ranker (its features, weights pulled towards its own) instead of "
                        "fitting one from scratch")
    p.add_argument("--memory", action="store_true",
                   help="also use the training files as training memory while fitting (then search with "
                        "--training too, so the features match)")
    p.add_argument("--strict", action="store_true",
                   help="fail (exit 2, nothing written) when under half of the training questions have a relevant "
                        "document in the collection, instead of warning")
    p.set_defaults(func=_fit_ranker)


def _fit_ranker(args: argparse.Namespace) -> int:
    from ..corpus.collection import Collection
    from ..retrieval.expansion import TrainingMemory
    from ..retrieval.retriever import Retriever
    from ..training.ranker_fitting import fit_ranker

    col = Collection.open(args.collection)
    memory = TrainingMemory.from_bioasq(args.training)
    ret = Retriever(col, training=memory if args.memory else None, ranker=None)
    ranker = fit_ranker(ret, memory, l2=args.l2, progress=True, prior="default" if args.adapt_default else None)
    info = ranker.info
    match = (f"{info['matched']} of {info['given']} training questions have a relevant document in "
             f"{args.collection}")
    if info["matched"] < info["given"] / 2:
        if args.strict:
            raise ValueError(f"{match}: the training files do not match the collection (--strict: nothing written)")
        print(f"medretrieve fit-ranker: warning: only {match}; the training files may not match the collection",
              file=sys.stderr)
    ranker.save(args.output)
    print(f"{match}; ranker fitted on {info['questions']} of them ({info['positives']} relevant of "
          f"{info['rows']} candidates) -> {args.output}")
    for name, w in zip(ranker.features, ranker.weights.tolist()):
        print(f"  {name:13s} {w:+.3f}")
    return 0


def _fit_parser(sub: Any, name: str, help: str, base_help: str, output_help: str, epochs: int,
                lr: float) -> argparse.ArgumentParser:
    """The arguments every fine-tuning command shares; returns the parser for the rest."""
    p = sub.add_parser(name, help=help, formatter_class=HelpFormatter)
    p.add_argument("collection", help="collection directory (medretrieve build)")
    p.add_argument("training", nargs="+", help="BioASQ golden JSON files: questions with relevant documents")
    p.add_argument("--base", required=True, help=base_help)
    p.add_argument("-o", "--output", required=True, help=output_help)
    p.add_argument("--epochs", type=int, default=epochs, help="passes over the training data")
    p.add_argument("--lr", type=float, default=lr, help="peak learning rate (AdamW, linear warm-up and decay)")
    p.add_argument("--quantize", choices=("int8", "int8-weights"), default=None,
                   help="export the model as int8 or int8-weights (see export-onnx; default fp32)")
    p.add_argument("--overwrite", action="store_true", help="replace the output directory if it exists")
    return p


def add_fit_query_encoder(sub: Any) -> None:
    p = _fit_parser(sub, "fit-query-encoder", "fine-tune a collection's query encoder on training questions "
                    "(needs the 'export' extra: torch)", "Hugging Face weights of the collection's encoder "
                    "(local directory)", "directory for the ONNX query encoder", epochs=4, lr=5e-5)
    p.add_argument("--batch-size", type=int, default=32, help="questions per step")
    p.add_argument("--temperature", type=float, default=None,
                   help="softmax temperature of the loss (default: 0.05 for unit-length vectors, 1 for raw "
                        "inner products)")
    p.set_defaults(func=_fit_query_encoder)


def _fit_query_encoder(args: argparse.Namespace) -> int:
    from ..corpus.collection import Collection
    from ..training.query_encoder import fit_query_encoder

    res = fit_query_encoder(Collection.open(args.collection), args.training, args.base, args.output,
                            epochs=args.epochs, lr=args.lr, batch_size=args.batch_size,
                            temperature=args.temperature, quantize=args.quantize, overwrite=args.overwrite,
                            progress=True)
    print(f"query encoder adapted on {res.questions} questions ({res.skipped} skipped) in {res.seconds:.0f} s; "
          f"loss per epoch {', '.join(f'{x:.3f}' for x in res.losses)} -> {res.out_dir}")
    print(f"search with it: medretrieve search {args.collection} QUESTION --query-encoder {res.out_dir}")
    return 0


def add_fit_encoder(sub: Any) -> None:
    p = _fit_parser(sub, "fit-encoder", "fine-tune both towers of a collection's symmetric encoder on training "
                    "questions, then (--reencode) write the collection re-encoded with it (needs the 'export' "
                    "extra: torch)", "Hugging Face weights of the collection's encoder (local directory)",
                    "directory for the ONNX encoder", epochs=3, lr=2e-5)
    p.add_argument("--batch-size", type=int, default=32, help="questions per step")
    p.add_argument("--hard-negatives", type=int, default=10,
                   help="each question's hard negative is drawn from this many top-ranked irrelevant chunks "
                        "(0: the batch's other chunks only)")
    p.add_argument("--weights-dir", metavar="DIR", default=None,
                   help="also keep the fine-tuned Hugging Face weights in DIR (a --base for later fits, e.g. "
                        "fit-cross-encoder)")
    p.add_argument("--reencode", metavar="DIR", default=None,
                   help="also write the collection re-encoded with the new encoder to DIR (a new collection; "
                        "the original is not changed)")
    p.set_defaults(func=_fit_encoder)


def _fit_encoder(args: argparse.Namespace) -> int:
    from ..corpus.collection import Collection
    from ..training.encoder import fit_encoder

    col = Collection.open(args.collection)
    if args.reencode and Path(args.reencode).exists() and not args.overwrite:  # refused before training, not after
        raise FileExistsError(f"{args.reencode} exists; pass --overwrite to replace it (a collection only)")
    res = fit_encoder(col, args.training, args.base, args.output, epochs=args.epochs, lr=args.lr,
                      batch_size=args.batch_size, hard_negatives=args.hard_negatives, quantize=args.quantize,
                      weights_dir=args.weights_dir, overwrite=args.overwrite, progress=True)
    print(f"encoder fitted on {res.questions} questions ({res.skipped} skipped) in {res.seconds:.0f} s; "
          f"loss per epoch {', '.join(f'{x:.3f}' for x in res.losses)} -> {res.out_dir}")
    if args.reencode:
        new = col.reencode(args.reencode, res.out_dir, overwrite=args.overwrite, progress=True)
        print(f"re-encoded {len(new)} chunks -> {args.reencode}")
        print(f"search it: medretrieve search {args.reencode} QUESTION")
    else:
        print("its vectors differ from the collection's: search a collection built with it (medretrieve build "
              f"SOURCE -o NEW --encoder {res.out_dir}, or --reencode NEW on this command)")
    return 0


def add_fit_cross_encoder(sub: Any) -> None:
    p = _fit_parser(sub, "fit-cross-encoder", "fine-tune a cross-encoder on training questions against a "
                    "collection (needs the 'export' extra: torch)", "Hugging Face model directory to start from "
                    "(local)", "directory for the ONNX cross-encoder", epochs=1, lr=3e-5)
    p.add_argument("--ranker", type=ranker_arg, default="default",
                   help="the learned ranker the candidates are ranked with, as they will be at search time: " + RANKER_HELP)
    p.add_argument("--group-size", type=int, default=8, help="one relevant chunk and this many - 1 negatives")
    p.set_defaults(func=_fit_cross_encoder)


def _fit_cross_encoder(args: argparse.Namespace) -> int:
    from ..corpus.collection import Collection
    from ..retrieval.retriever import Retriever
    from ..training.cross_encoder import fit_cross_encoder

    ret = Retriever(Collection.open(args.collection), ranker=args.ranker, warmup=False)  # None: no ranker
    res = fit_cross_encoder(ret, args.training, args.base, args.output, epochs=args.epochs, lr=args.lr,
                            group_size=args.group_size, quantize=args.quantize, overwrite=args.overwrite,
                            progress=True)
    print(f"cross-encoder fitted on {res.questions} questions ({res.skipped} skipped, {res.groups} groups) in "
          f"{res.seconds:.0f} s; loss per epoch {', '.join(f'{x:.3f}' for x in res.losses)} -> {res.out_dir}")
    print(f"search with it: medretrieve search {args.collection} QUESTION --cross-encoder {res.out_dir}")
    return 0
