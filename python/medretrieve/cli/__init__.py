"""Command line: ``medretrieve build | collection | search | fit-ranker | answer | eval | bioasq | demo | serve | ...``.

One module per command group registers its commands (``module:function`` below); modules load lazily, so
``--help`` stays fast and optional dependencies (torch for export) load only for the command that needs them.
Library errors become one-line messages and exit codes in one place (:mod:`.errors`).
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import List, Optional, Sequence

from .errors import run_command

# subcommand -> "module:function" that registers it on the subparsers
_COMMANDS = {
    "export-onnx": "build:add_export",
    "build": "build:add_build",
    "convert-hnswlib": "build:add_convert_hnswlib",
    "collection": "collection:add_collection",
    "search": "search:add_search",
    "fetch-pubmed": "pubmed:add_fetch_pubmed",
    "fit-ranker": "train:add_fit_ranker",
    "fit-query-encoder": "train:add_fit_query_encoder",
    "fit-encoder": "train:add_fit_encoder",
    "fit-cross-encoder": "train:add_fit_cross_encoder",
    "answer": "answer:add_answer",
    "eval": "evaluate:add_eval",
    "bioasq": "bioasq:add_bioasq",
    "demo": "demo:add_demo",
    "serve": "serve:add_serve",
    "mcp": "mcp_server:add_mcp",
}


def build_parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    """The parser; with ``command``, only that command's module is imported (the others get stubs)."""
    parser = argparse.ArgumentParser(
        prog="medretrieve",
        description="Retrieval core for grounded medical RAG: build collections, search them under a deadline, "
                    "fit rankers, answer with citations, evaluate on BioASQ and MedRGB.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, target in _COMMANDS.items():
        if command is not None and name != command:
            # Register a stub so --help lists every command without importing it.
            sub.add_parser(name, help=f"(see `medretrieve {name} --help`)")
            continue
        module, _, function = target.partition(":")
        getattr(importlib.import_module(f"{__name__}.{module}"), function)(sub)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args_list: List[str] = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in args_list if not a.startswith("-")), None)
    parser = build_parser(command if command in _COMMANDS else None)
    args = parser.parse_args(args_list)
    return run_command(args.command, args.func, args)


if __name__ == "__main__":
    sys.exit(main())
