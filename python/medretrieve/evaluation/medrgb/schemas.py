"""JSON schemas of MedRGB's replies, as an OpenAI ``response_format`` (built as the BioASQ ones are,
:mod:`medretrieve.generation.schemas`).

Why: with a bare ``{"type": "json_object"}`` a small model writes *some* JSON object and may close it before the
answer, e.g. SmolLM2-135M under llama.cpp's JSON grammar replied ``{"step_by_step_thinking": "A, B"}`` to every
MedRGB question (the 4-question smoke run's "replies without an answer choice"). A schema with the prompt's fields
as ``required`` (the answer an ``enum`` of the letters) makes a constrained decoder (llama.cpp's grammar, vLLM's
guided decoding) write every field in the prompt's order; which letter, and what the other fields say, is still
the model's choice. ``step_by_step_thinking`` is capped (``maxLength``) so the answer fits in the token budget.
"""
from __future__ import annotations

from typing import Any, Optional

from ...generation.schemas import string_schema
from ...records import INSUFFICIENT
from .prompts import Options, check_scenario, option_letters

__all__ = ["medrgb_response_format"]


def _doc_numbers(n_documents: int) -> dict:
    # bounded: SmolLM2 otherwise counts "1, 2, 3, ..." until the token budget runs out, and the reply is cut
    return {"type": "array", "items": {"type": "integer"}, "maxItems": n_documents}


def medrgb_response_format(
    scenario: str,
    options: Options,
    n_documents: int,
    n_sub_questions: int = 0,
    max_tokens: Optional[int] = None,
) -> dict:
    """The ``response_format`` of a MedRGB reply (the fields of ``templates/medrgb_<scenario>.txt``, in order).

    ``n_documents``: documents shown (robustness: one ``document_analysis`` entry each; sufficiency: at most that
    many ``relevant_documents``); ``n_sub_questions``: sub-questions shown (integration, and robustness when
    given: that many ``sub_answers``); ``max_tokens``: the reply's token budget; the free-text fields (thinking,
    corrections, sub-answers) share ``max_tokens`` characters (``maxLength`` each, at least 16), about a quarter
    of the budget, so the fields after them still fit (SmolLM2's robustness replies were cut at 256 tokens with
    twice that); None: no caps.
    """
    check_scenario(scenario)
    for name, value in (("n_documents", n_documents), ("n_sub_questions", n_sub_questions)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError(f"max_tokens must be a positive integer or None, got {max_tokens!r}")
    if scenario == "integration" and n_sub_questions < 1:
        raise ValueError("the integration scenario needs sub-questions (n_sub_questions >= 1)")
    text_fields = 1 + (n_documents if scenario == "robustness" else 0) + 2 * n_sub_questions
    # ~1 character a budget token between the free-text fields (~1/4 of the budget): keys, numbers and
    # punctuation take the rest (most of it in robustness: 5 analyses, 3 sub-answers)
    cap = None if max_tokens is None else max(16, max_tokens // text_fields)
    choices = list(option_letters(options))
    if scenario == "sufficiency":
        choices.append(INSUFFICIENT)
    props: dict[str, Any] = {}
    if scenario == "sufficiency":
        props["relevant_documents"] = _doc_numbers(n_documents)
    if scenario == "robustness":
        entry = {"type": "object", "properties": {"document": {"type": "integer"},
                                                  "has_factual_error": {"type": "boolean"},
                                                  "correction": string_schema(cap)},
                 "required": ["document", "has_factual_error", "correction"]}
        props["document_analysis"] = {"type": "array", "items": entry, "minItems": n_documents,
                                      "maxItems": n_documents}
    if n_sub_questions:
        sub = {"type": "object", "properties": {"sub_question": string_schema(cap),
                                                "answer": string_schema(cap),
                                                "documents": _doc_numbers(n_documents)},
               "required": ["sub_question", "answer", "documents"]}
        props["sub_answers"] = {"type": "array", "items": sub, "minItems": n_sub_questions,
                                "maxItems": n_sub_questions}
    props["step_by_step_thinking"] = string_schema(cap)
    props["answer_choice"] = {"type": "string", "enum": choices}
    schema = {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
    return {"type": "json_schema", "json_schema": {"name": f"medrgb_{scenario}", "schema": schema}}
