"""Query-expansion terms from an LLM, as the term source retrieval asks for synonyms.

Retrieval never imports generation: it takes any ``f(question, ms_left) -> terms``, and :func:`llm_synonyms`
makes one from an LLM backend (``medretrieve.generation.llm``) with the expansion prompt and the list parser.
"""
from __future__ import annotations

from typing import Any, List, Optional

from ..retrieval.expansion import TermSource
from .parsers import parse_list
from .prompts import expansion_messages


def llm_synonyms(backend: Any, kind: str = "synonyms", max_terms: int = 8, max_tokens: int = 96) -> TermSource:
    """A term source asking ``backend`` (``generate(messages, ...)``) for ``kind`` terms (``synonyms`` or
    ``relations``) of a question, at temperature 0, within the time the search has left.

    The returned callable raises the backend's ``LLMError`` or ``ValueError`` (unreadable reply); the expand stage
    records the failure and searches on without the terms.
    """
    if not hasattr(backend, "generate"):
        raise TypeError(f"backend must have a generate(messages, ...) method, got {type(backend).__name__}")
    if not isinstance(max_terms, int) or max_terms < 1:
        raise ValueError(f"max_terms must be a positive integer, got {max_terms!r}")

    def terms(question: str, deadline_ms: Optional[float]) -> List[str]:
        text = backend.generate(expansion_messages(question, kind=kind), max_tokens=max_tokens, temperature=0.0,
                                deadline_ms=deadline_ms)
        return [t.strip() for t in parse_list(text) if t.strip()][:max_terms]

    return terms
