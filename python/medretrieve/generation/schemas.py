"""JSON schemas of the replies the MedRGB and BioASQ prompts ask for, as an OpenAI ``response_format``.

Why: with a bare ``{"type": "json_object"}`` a small model writes *some* JSON object and may close it before the
answer, e.g. SmolLM2-135M under llama.cpp's JSON grammar replied ``{"step_by_step_thinking": "A, B"}`` to every
MedRGB question (the 4-question smoke run's "replies without an answer choice"). A schema with the prompt's fields
as ``required`` (the answer an ``enum`` of the letters) makes a constrained decoder (llama.cpp's grammar, vLLM's
guided decoding) write every field in the prompt's order; which letter, and what the other fields say, is still
the model's choice. ``step_by_step_thinking`` is capped (``maxLength``) so the answer fits in the token budget.
The BioASQ schema (:func:`bioasq_response_format`) does the same for the exact answer of each question type:
SmolLM2-135M, asked for an ``EXACT:`` line in words, wrote numbered prose for every factoid and list question.

The returned dict is OpenAI's ``{"type": "json_schema", "json_schema": {"name", "schema"}}``; a server
that rejects it gets plain text (:class:`~.llm.OpenAIBackend` drops the field), and
:class:`~.llamacpp.LlamaCppBackend` hands the schema to llama.cpp's grammar.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional, Sequence, Union

from .extractive import FACTOID_CANDIDATES
from .prompts import BIOASQ_TYPES, INSUFFICIENT, MEDRGB_SCENARIOS, option_letters

__all__ = ["bioasq_response_format", "medrgb_response_format", "schema_of"]

#: a list answer is capped where a small model starts to repeat itself
LIST_ENTITIES = 20
ENTITY_MAX_CHARS = 40  # an entity is a short name (a gene, drug, disease, number), not a sentence

def _doc_numbers(n_documents: int) -> dict:
    # bounded: SmolLM2 otherwise counts "1, 2, 3, ..." until the token budget runs out, and the reply is cut
    return {"type": "array", "items": {"type": "integer"}, "maxItems": n_documents}


def _text(max_chars: Optional[int]) -> dict:
    return {"type": "string"} if max_chars is None else {"type": "string", "maxLength": max_chars}


def medrgb_response_format(
    scenario: str,
    options: Union[Mapping[str, str], Sequence[str]],
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
    if scenario not in MEDRGB_SCENARIOS:
        raise ValueError(f"scenario must be one of {MEDRGB_SCENARIOS}, got {scenario!r}")
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
                                                  "correction": _text(cap)},
                 "required": ["document", "has_factual_error", "correction"]}
        props["document_analysis"] = {"type": "array", "items": entry, "minItems": n_documents,
                                      "maxItems": n_documents}
    if n_sub_questions:
        sub = {"type": "object", "properties": {"sub_question": _text(cap),
                                                "answer": _text(cap),
                                                "documents": _doc_numbers(n_documents)},
               "required": ["sub_question", "answer", "documents"]}
        props["sub_answers"] = {"type": "array", "items": sub, "minItems": n_sub_questions,
                                "maxItems": n_sub_questions}
    props["step_by_step_thinking"] = _text(cap)
    props["answer_choice"] = {"type": "string", "enum": choices}
    schema = {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
    return {"type": "json_schema", "json_schema": {"name": f"medrgb_{scenario}", "schema": schema}}


def bioasq_response_format(qtype: str, max_tokens: Optional[int] = None) -> dict:
    """The ``response_format`` of a BioASQ answer (``templates/bioasq_<qtype>.txt``): ``ideal_answer``, then
    ``exact_answer``, so the model writes its reading of the snippets before it commits to the exact answer
    (with the exact answer first, SmolLM2-135M copied the prompt's example "yes" and then explained "no").

    ``exact_answer`` by type: yesno ``"yes"`` or ``"no"``; factoid 1 to 5 ranked candidate names; list 1 to
    :data:`LIST_ENTITIES` entity names (each name at most :data:`ENTITY_MAX_CHARS` characters); summary has none.
    ``max_tokens``: the reply's token budget; the ideal answer gets about 1 character a budget token (a quarter
    of the budget at ~4 characters a token), so the exact answer after it still fits; a summary, which has only
    the ideal answer, 3 characters a token; None: no cap.
    """
    if qtype not in BIOASQ_TYPES:
        raise ValueError(f"qtype must be one of {BIOASQ_TYPES}, got {qtype!r}")
    if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1):
        raise ValueError(f"max_tokens must be a positive integer or None, got {max_tokens!r}")
    name = {"type": "string", "minLength": 1, "maxLength": ENTITY_MAX_CHARS}
    exact: Optional[dict] = None
    if qtype == "yesno":
        exact = {"type": "string", "enum": ["yes", "no"]}
    elif qtype == "factoid":
        exact = {"type": "array", "items": name, "minItems": 1, "maxItems": FACTOID_CANDIDATES}
    elif qtype == "list":
        exact = {"type": "array", "items": name, "minItems": 1, "maxItems": LIST_ENTITIES}
    chars_a_token = 3 if exact is None else 1
    props: dict[str, Any] = {"ideal_answer": _text(None if max_tokens is None else max(32, chars_a_token * max_tokens))}
    if exact is not None:
        props["exact_answer"] = exact
    schema = {"type": "object", "properties": props, "required": list(props), "additionalProperties": False}
    return {"type": "json_schema", "json_schema": {"name": f"bioasq_{qtype}", "schema": schema}}


def schema_of(response_format: Mapping[str, Any]) -> Optional[dict]:
    """The JSON schema inside an OpenAI ``json_schema`` response format (None for any other format)."""
    if response_format.get("type") != "json_schema":
        return None
    inner = response_format.get("json_schema")
    schema = inner.get("schema") if isinstance(inner, Mapping) else None
    if not isinstance(schema, dict):
        raise ValueError("a json_schema response_format needs {'json_schema': {'schema': {...}}}")
    return schema
