"""The HTTP API's wire format, shared by the server (:mod:`medretrieve.server`) and the client
(:mod:`medretrieve.client`): request bodies (pydantic models, which also make the OpenAPI document), the error
body, the limits, and the response records of :mod:`medretrieve.records`.

Requests are strict: unknown fields, wrong types ("10" for an integer) and out-of-range values are refused with
422 and an error naming the field. A search answers ``SearchResult.to_dict(explain)`` and an answer
``Answer.to_dict(explain)``, compact unless the request asks ``"explain": true`` (stages without their reasons,
hits with empty per-stage scores); ``SearchResult.from_dict`` / ``Answer.from_dict`` read both.

This module imports pydantic and :mod:`medretrieve.records` only: a client loads no engine.
"""
from __future__ import annotations

import re
from typing import Annotated, Any, Dict, Iterable, List, Literal, Mapping, Optional, get_args

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, field_validator,
                      model_validator)

from .records import Answer, Citation, Hit, SearchResult, StageInfo

__all__ = ["MAX_K", "MAX_BATCH", "MAX_DEADLINE_MS", "MAX_QUESTION_CHARS", "DEADLINE_HEADER", "SECTIONS",
           "WordedQuestion", "ERROR_TYPES", "Stages", "SearchOptions", "SearchRequest", "BatchSearchRequest",
           "AnswerRequest", "BatchSearchResponse", "ErrorDetail", "ErrorResponse", "deadline_header_ms",
           "field_errors", "Answer", "Citation", "Hit", "SearchResult", "StageInfo"]

MAX_K = 100  # most hits (or evidence passages) one request may ask for
MAX_BATCH = 64  # most questions in one /v1/search:batch (ServerConfig.max_batch may lower it)
MAX_DEADLINE_MS = 600_000.0  # the longest deadline a request may name, in the body or the header (10 min)
MAX_QUESTION_CHARS = 4000
DEADLINE_HEADER = "X-Deadline-Ms"

#: Section categories a search may be restricted to: ``medretrieve.corpus.chunking.SECTION_CATEGORIES`` and
#: ``other`` (a test keeps the two lists equal; the server must not load the chunker to check a request).
Section = Literal["treatment", "symptoms", "diagnosis", "etiology", "prognosis", "background", "methods", "results",
                  "conclusions", "other"]
SECTIONS = get_args(Section)

#: Every ``error.type`` the API answers, with its status (the table of ``docs/serving.md``).
ERROR_TYPES: Dict[str, int] = {
    "invalid_json": 400, "reload_disabled": 403, "not_found": 404, "method_not_allowed": 405,
    "request_timeout": 408, "reload_running": 409, "body_too_large": 413, "invalid_request": 422, "overloaded": 429,
    "internal_error": 500, "reload_failed": 500, "not_ready": 503, "too_many_connections": 503, "deadline_exceeded": 504}

def _whole_number(value: Any) -> Any:
    """58.0 is an integer in JSON Schema's sense (a number without a fraction): take it as 58. A string still is
    not one (the models are strict)."""
    return int(value) if isinstance(value, float) and value.is_integer() else value


Integer = Annotated[int, BeforeValidator(_whole_number)]
DeadlineMs = Annotated[float, Field(gt=0, le=MAX_DEADLINE_MS, allow_inf_nan=False)]
_DEADLINE = TypeAdapter(DeadlineMs)


def deadline_header_ms(raw: str) -> float:
    """The ``X-Deadline-Ms`` header's value, checked as the body's ``deadline_ms`` is (the same rule and limit):
    pydantic's ValidationError when it is not a number of ms in (0, 600,000]."""
    return float(_DEADLINE.validate_python(raw, strict=False))


def field_errors(errors: Iterable[Mapping[str, Any]]) -> List[Dict[str, Optional[str]]]:
    """``[{"field", "message"}]`` of pydantic's validation errors: the field as a dotted path (None for the body
    as a whole; a leading ``body``, FastAPI's, dropped) and a message that names it."""
    listed: List[Dict[str, Optional[str]]] = []
    for e in errors:
        name = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or None
        kind = e.get("type")
        msg = "unknown field" if kind == "extra_forbidden" else str(e.get("msg", "invalid"))
        msg = msg[len("Value error, "):] if msg.startswith("Value error, ") else msg
        if name is None:
            msg = "a JSON request body is required" if kind == "missing" else "the request body must be a JSON object"
        listed.append({"field": name, "message": f"{name}: {msg}" if name else msg})
    return listed


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


#: The word rule of a question: it holds a letter or a digit (ASCII's, or one of the letters and digits of the
#: scripts of Unicode's Basic Multilingual Plane, by block: a few punctuation marks of those scripts pass too; no
#: whitespace, which a blank question is made of).
#: Written with explicit ranges only, so that Python's ``re`` (the server) and ECMA-262 (the OpenAPI schema's
#: pattern as fuzzers and generated clients read it, where ``\w`` is ASCII) agree on every string.
WORD_PATTERN = (r"[0-9A-Za-z\u00AA\u00B5\u00BA\u00C0-\u00D6\u00D8-\u00F6\u00F8-\u02FF\u0370-\u03FF\u0400-\u167F"
                r"\u1681-\u1FFF\u2C00-\u2DFF\u3040-\uD7FF\uF900-\uFDFF\uFE70-\uFEFC\uFF10-\uFF19\uFF21-\uFF3A\uFF41-\uFF5A"
                r"\uFF66-\uFFDC]")
_WORD = re.compile(WORD_PATTERN)


def _question(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or blank")
    if not _WORD.search(value):
        raise ValueError("must hold a word (a letter or a digit), not only punctuation or symbols")
    return value


# the schema states the word rule as its pattern, so that generated clients and fuzzers know it; _question checks
# it with a message that says what is wrong
Question = Annotated[str, Field(min_length=1, max_length=MAX_QUESTION_CHARS,
                                description="the question, in natural language (it must hold a letter or a digit)",
                                json_schema_extra={"pattern": WORD_PATTERN})]
#: The same question with its word rule applied, for a question checked outside the request models (the MCP tools'
#: arguments): one rule and one limit, whichever door the question comes in by.
WordedQuestion = Annotated[Question, AfterValidator(_question)]


class Stages(_Strict):
    """Search stages a request may switch off (all on by default; for ablations and cheaper searches). At least one
    of ``dense`` and ``lexical`` stays on (the schema says so too)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"not": {
        "required": ["dense", "lexical"],
        "properties": {"dense": {"const": False}, "lexical": {"const": False}}}})

    expand: bool = True
    rerank: bool = True
    diversify: bool = True
    recover: bool = True
    route: bool = True
    dense: bool = True
    lexical: bool = True
    feedback: bool = True

    @model_validator(mode="after")
    def _one_first_stage(self) -> "Stages":
        if not (self.dense or self.lexical):
            raise ValueError("at least one of dense and lexical must be on")
        return self


class SearchOptions(_Strict):
    """What a search returns and how long it may take."""

    k: Integer = Field(10, ge=1, le=MAX_K, description="hits to return")
    deadline_ms: Optional[DeadlineMs] = Field(
        None, description="budget (ms) from the request's arrival, queueing included; the server's default when "
                          "absent. The X-Deadline-Ms header may set it too (the smaller one counts).")
    # (the bounds before the validator: after it, pydantic writes them to the schema as "ge"/"le")
    per_document: Optional[Annotated[int, Field(ge=1, le=MAX_K), BeforeValidator(_whole_number)]] = Field(
        None, description="most hits from one document")
    sections: Optional[List[Section]] = Field(
        None, min_length=1, description="section categories every hit must come from")
    stages: Stages = Field(default_factory=Stages)
    explain: bool = Field(False, description="add each stage's reason (the ranker's provenance included) and each "
                                             "hit's per-stage scores to the response")

    def search_kwargs(self) -> Dict[str, Any]:
        """Keyword arguments of ``Retriever.search`` (all but the question and the deadline)."""
        return dict(k=self.k, per_document=self.per_document, sections=self.sections, **self.stages.model_dump())


class SearchRequest(SearchOptions):
    """``POST /v1/search``: e.g. ``{"question": "What is the first-line drug for type 2 diabetes?", "k": 5}``."""

    question: Question
    _check_question = field_validator("question")(_question)


class BatchSearchRequest(SearchOptions):
    """``POST /v1/search:batch``: several questions with the same options, one deadline for them all."""

    questions: List[Question] = Field(..., min_length=1, max_length=MAX_BATCH)

    @field_validator("questions")
    @classmethod
    def _each_question(cls, value: List[str]) -> List[str]:
        for i, q in enumerate(value):
            try:
                _question(q)
            except ValueError as exc:
                raise ValueError(f"questions[{i}] {exc}") from None
        return value


class AnswerRequest(_Strict):
    """``POST /v1/answer``: e.g. ``{"question": "Is metformin first-line for type 2 diabetes?", "k": 5}``."""

    question: Question
    k: Integer = Field(10, ge=1, le=MAX_K, description="evidence passages to retrieve")
    deadline_ms: Optional[DeadlineMs] = Field(None, description="budget (ms) for queueing, retrieval and generation")
    qtype: Optional[Literal["yesno", "factoid", "list", "summary"]] = Field(
        None, description="ask for an exact answer of this BioASQ type (default: the detected question type)")
    mode: Literal["cite", "answer_only", "bioasq"] = Field(
        "cite", description="cite: numbered sources and checked [n] citations; answer_only: the bare answer; "
                            "bioasq: exact + ideal answer. Without an LLM the answer is extractive: cite only")
    max_tokens: Integer = Field(512, ge=1, le=8192)
    stream: bool = Field(False, description="answer as server-sent events: evidence, text deltas, the answer")
    explain: bool = Field(False, description="add each evidence hit's per-stage scores")
    _check_question = field_validator("question")(_question)


class BatchSearchResponse(BaseModel):
    """One ``SearchResult.to_dict()`` per question, in order."""

    results: List[SearchResult]


class ErrorDetail(BaseModel):
    type: str = Field(description="one of: " + ", ".join(f"{name} ({status})" for name, status in ERROR_TYPES.items()))
    message: str
    field: Optional[str] = Field(None, description="the request field (dotted path) or header at fault, when one is")


class ErrorResponse(BaseModel):
    """Every error: ``{"error": {"type": ..., "message": ..., "field": ...}}``."""

    error: ErrorDetail
