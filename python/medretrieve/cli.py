"""Command line: ``medretrieve build | search | fit-ranker | fit-query-encoder | fit-cross-encoder | answer | ...``.

Each subcommand lives in the module of its pipeline stage, which provides
``add_cli(subparsers)`` (or the function named after a colon); modules are imported lazily so ``--help`` stays fast
and optional dependencies (torch for export) load only when used.
"""
from __future__ import annotations

import argparse
import importlib
import sys
from typing import Optional, Sequence

# subcommand -> module that registers it (with add_cli(subparsers), or "module:function").
_COMMANDS = {
    "export-onnx": "medretrieve.export",
    "build": "medretrieve.collection",
    "search": "medretrieve.retrieve",
    "fit-ranker": "medretrieve.rerank",
    "fit-query-encoder": "medretrieve.adapt",
    "fit-cross-encoder": "medretrieve.adapt:add_cross_encoder_cli",
    "demo": "medretrieve.demo",
    "answer": "medretrieve.generate",
    "eval": "medretrieve.evaluate",
}


def build_parser(command: Optional[str] = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="medretrieve", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name, module in _COMMANDS.items():
        if command is not None and name != command:
            # Register a stub so --help lists every command without importing it.
            sub.add_parser(name, help=f"(see `medretrieve {name} --help`)")
            continue
        module, _, function = module.partition(":")
        try:
            mod = importlib.import_module(module)
        except ImportError as exc:  # optional extra missing
            p = sub.add_parser(name, help=f"unavailable: {exc}")
            p.set_defaults(func=lambda args, exc=exc: _unavailable(exc))
            continue
        getattr(mod, function or "add_cli")(sub)
    return parser


def _unavailable(exc: Exception) -> int:
    print(f"medretrieve: this command needs an optional dependency: {exc}", file=sys.stderr)
    return 2


def main(argv: Optional[Sequence[str]] = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((a for a in argv if not a.startswith("-")), None)
    parser = build_parser(command if command in _COMMANDS else None)
    args = parser.parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
