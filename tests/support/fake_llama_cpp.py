"""A stand-in for the ``llama_cpp`` module (llama-cpp-python builds llama.cpp from source for ~25 minutes, so CI
does not install it): ``Llama`` streams the reply a handler writes, a few characters per chunk, as
``create_chat_completion(stream=True)`` does. Install it with ``install(monkeypatch, handler)``; the handler
gets the request as a dict (``messages``, ``max_tokens``, ``temperature``, ``response_format``) and returns the
reply text, or raises (``ValueError`` as llama.cpp does for a prompt over the context window)."""
from __future__ import annotations

import sys
import time
import types
from typing import Any, Callable, Iterator

Handler = Callable[[dict], str]


class Llama:
    handler: Handler = staticmethod(lambda request: "")
    piece_delay_s = 0.0
    loaded: list = []

    def __init__(self, model_path: str, n_ctx: int = 512, n_threads: Any = None, seed: int = 0,
                 verbose: bool = True) -> None:
        if open(model_path, "rb").read(4) != b"GGUF":
            raise ValueError(f"Failed to load model from file: {model_path}")
        self.n_ctx = n_ctx
        type(self).loaded.append({"model_path": model_path, "n_ctx": n_ctx, "n_threads": n_threads, "seed": seed})

    def create_chat_completion(self, messages: list, max_tokens: int = 16, temperature: float = 0.8,
                               stream: bool = False, response_format: Any = None) -> Iterator[dict]:
        assert stream, "the backend streams, so a deadline can stop it"
        request = {"messages": messages, "max_tokens": max_tokens, "temperature": temperature,
                   "response_format": response_format}
        prompt_tokens = sum(len(m["content"].split()) for m in messages)
        if prompt_tokens + max_tokens > self.n_ctx:
            raise ValueError(f"Requested tokens ({prompt_tokens + max_tokens}) exceed context window of {self.n_ctx}")
        text = type(self).handler(request)

        def chunks() -> Iterator[dict]:
            yield {"choices": [{"delta": {"role": "assistant"}, "finish_reason": None}]}
            for i in range(0, len(text), 4):
                time.sleep(self.piece_delay_s)
                yield {"choices": [{"delta": {"content": text[i:i + 4]}, "finish_reason": None}]}
            yield {"choices": [{"delta": {}, "finish_reason": "stop"}]}

        return chunks()


def install(monkeypatch: Any, handler: Handler, piece_delay_s: float = 0.0) -> type:
    """Put a fake ``llama_cpp`` module in ``sys.modules`` whose ``Llama`` answers with ``handler``."""
    cls = type("Llama", (Llama,), {"handler": staticmethod(handler), "piece_delay_s": piece_delay_s, "loaded": []})
    module = types.ModuleType("llama_cpp")
    module.Llama = cls  # type: ignore[attr-defined]
    grammar = types.ModuleType("llama_cpp.llama_grammar")
    grammar.json_schema_to_gbnf = _schema_to_gbnf  # type: ignore[attr-defined]
    module.llama_grammar = grammar  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "llama_cpp", module)
    monkeypatch.setitem(sys.modules, "llama_cpp.llama_grammar", grammar)
    return cls


def _schema_to_gbnf(schema: str) -> str:
    """Like llama.cpp's converter for what the tests need: a schema without a known ``type`` is refused."""
    import json

    if json.loads(schema).get("type") not in ("object", "array", "string"):
        raise ValueError("Unrecognized schema")
    return "root ::= object"


def gguf(path: Any) -> Any:
    """A file that starts like a GGUF (the fake loader checks the magic)."""
    path.write_bytes(b"GGUF" + bytes(28))
    return path
