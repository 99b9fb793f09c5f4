"""Generation: LLM backends (``llm``), prompts and templates (``prompts``), reply parsers (``parsers``), citation
checks (``citations``), grounded answers with abstention (``generate``), LLM expansion terms (``terms``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._exports import attach as _attach

if TYPE_CHECKING:  # the public names, declared once (medretrieve._exports)
    from .generate import Answerer as Answerer
    from .llm import Backend as Backend
    from .llm import StreamingBackend as StreamingBackend
    from .llm import OpenAIBackend as OpenAIBackend
    from .llm import TransformersBackend as TransformersBackend
    from .llm import LLMError as LLMError

__getattr__, __dir__, __all__ = _attach(__name__, __file__)
