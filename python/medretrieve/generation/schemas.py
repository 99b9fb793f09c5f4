"""JSON schemas of the replies the BioASQ prompts ask for, as an OpenAI ``response_format``.

Why: a small model asked for an ``EXACT:`` line in words writes prose (SmolLM2-135M wrote numbered prose for every
factoid and list question), and with a bare ``{"type": "json_object"}`` it writes *some* JSON object and may close
it before the answer. A schema with the prompt's fields as ``required`` makes a constrained decoder (llama.cpp's
grammar, vLLM's guided decoding) write every field in the prompt's order; what the fields say is still the
model's choice. Free text is capped (``maxLength``) so the answer fits in the token budget. MedRGB's reply schemas,
built the same way, are :mod:`medretrieve.evaluation.medrgb.schemas`.

The returned dict is OpenAI's ``{"type": "json_schema", "json_schema": {"name", "schema"}}``; a server
that rejects it gets plain text (:class:`~.llm.OpenAIBackend` drops the field), and
:class:`~.llamacpp.LlamaCppBackend` hands the schema to llama.cpp's grammar.
"""
from __future__ import annotations

from typing import Any, Mapping, Optional

from .extractive import FACTOID_CANDIDATES
from ..records import BIOASQ_TYPES

__all__ = ["bioasq_response_format", "schema_of", "string_schema", "LIST_ENTITIES", "ENTITY_MAX_CHARS"]

#: a list answer is capped where a small model starts to repeat itself
LIST_ENTITIES = 20
ENTITY_MAX_CHARS = 40  # an entity is a short name (a gene, drug, disease, number), not a sentence

def string_schema(max_chars: Optional[int]) -> dict:
    """A JSON string schema, capped at ``max_chars`` characters (``maxLength``; None: no cap)."""
    return {"type": "string"} if max_chars is None else {"type": "string", "maxLength": max_chars}


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
    props: dict[str, Any] = {"ideal_answer": string_schema(None if max_tokens is None else max(32, chars_a_token * max_tokens))}
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
