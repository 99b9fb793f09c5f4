"""The LLM options the answering commands share (``eval bioasq``, ``eval medrgb``, ``bioasq run``): a server
(``--llm URL --model NAME``), a saved Hugging Face model (``--backend transformers --model-path DIR``) or a GGUF
file run by llama.cpp in the process (``--backend llamacpp --model-path FILE.gguf``)."""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Optional

BACKEND_HELP = ("openai: an OpenAI-compatible server (vLLM, llama.cpp's server, OpenAI) at --llm with --model; "
                "transformers: a saved Hugging Face model folder (--model-path); llamacpp: a GGUF file run in this "
                "process by llama-cpp-python (--model-path)")


def add_llm_options(p: argparse.ArgumentParser, workers: bool = True) -> None:
    """``--backend``, ``--llm``, ``--model``, ``--model-path``, ``--n-ctx``, ``--n-threads``, ``--api-key``,
    ``--timeout-s`` (and ``--workers``)."""
    from ..generation.llamacpp import BACKENDS

    p.add_argument("--backend", choices=BACKENDS, default="openai", help=BACKEND_HELP)
    p.add_argument("--llm", default=None, metavar="URL",
                   help="OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (--backend openai)")
    p.add_argument("--model", default=None,
                   help="model name sent to the server (--backend openai); with a local model, its name in the "
                        "results (default: the file or folder name)")
    p.add_argument("--model-path", default=None,
                   help="--backend transformers: the saved model folder; --backend llamacpp: the .gguf file")
    p.add_argument("--n-ctx", type=int, default=4096, help="--backend llamacpp: context window to allocate (tokens)")
    p.add_argument("--n-threads", type=int, default=None,
                   help="--backend llamacpp: CPU threads (default: llama.cpp's choice, half the cores)")
    p.add_argument("--api-key", default=None, help="API key (else MEDRETRIEVE_LLM_API_KEY / OPENAI_API_KEY)")
    p.add_argument("--timeout-s", type=float, default=60.0, help="per-request timeout of a server (s)")
    if workers:
        p.add_argument("--workers", type=int, default=4,
                       help="parallel LLM requests (a llamacpp or transformers backend answers one at a time)")


def llm_given(args: argparse.Namespace) -> bool:
    """Whether the options name an LLM at all (a local backend, or a server URL / model name)."""
    return args.backend != "openai" or args.llm is not None or args.model is not None


def backend_from_args(args: argparse.Namespace, required: bool = True) -> Optional[Any]:
    """The backend the options describe; None when ``required`` is False and they name none."""
    from ..generation.llamacpp import make_backend

    if not required and not llm_given(args):
        return None
    return make_backend(args.backend, url=args.llm, model=args.model if args.backend == "openai" else None,
                        model_path=args.model_path, api_key=args.api_key, timeout_s=args.timeout_s,
                        n_ctx=args.n_ctx, n_threads=args.n_threads)


def model_label(args: argparse.Namespace) -> str:
    """The model's name in results: ``--model``, else the local model's file or folder name."""
    if args.model:
        return str(args.model)
    return Path(args.model_path).name if args.model_path else ""


def workers_for(backend: Any, asked: int) -> int:
    """Parallel requests: ``asked``, capped by what the backend serves at once (local models: 1)."""
    if asked < 1:
        raise ValueError(f"--workers must be >= 1, got {asked}")
    cap = getattr(backend, "max_concurrency", None)
    return min(asked, int(cap)) if cap else asked
