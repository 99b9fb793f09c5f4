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

import copy
import math
import numbers
import operator
import re
from dataclasses import dataclass
from types import MappingProxyType
from typing import Annotated, Any, Dict, Iterable, List, Literal, Mapping, Optional, Tuple, Union, get_args

from pydantic import (AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter, field_validator,
                      model_validator)

from .filters import MAX_FILTER_CHARS, Filter, FilterError, parse_filter
from .records import Answer, BioASQType, Citation, Hit, SearchResult, StageInfo

__all__ = ["MAX_K", "MAX_BATCH", "MAX_DEADLINE_MS", "MAX_QUESTION_CHARS", "DEFAULT_K", "DEFAULT_DEADLINE_MS",
           "DEADLINE_HEADER", "SECTIONS", "WordedQuestion", "ERROR_TYPES", "STAGE_SWITCHES", "Stages", "SearchOptions",
           "SearchOption", "SEARCH_OPTIONS", "check_search_options", "check_question", "SearchOptionError",
           "SearchOptionTypeError", "SearchOptionValueError", "SearchRequest", "BatchSearchRequest", "AnswerRequest",
           "FILTER_OPTIONS",
           "FacetsRequest", "FacetsResponse", "MAX_FACETS",
           "BatchSearchResponse", "ErrorDetail", "ErrorResponse", "deadline_header_ms", "field_errors", "Answer",
           "Citation", "Hit", "SearchResult", "StageInfo"]

MAX_K = 100  # most hits (or evidence passages) one request may ask for
MAX_BATCH = 64  # most questions in one /v1/search:batch (ServerConfig.max_batch may lower it)
MAX_DEADLINE_MS = 600_000.0  # the longest deadline a request may name, in the body or the header (10 min)
MAX_QUESTION_CHARS = 4000
DEFAULT_K = 10  # hits a search returns when the request does not say (every door: this one constant)
#: the deadline of a search that names none (ms): ``Retriever.search``'s default and a server's ``--deadline-ms``
DEFAULT_DEADLINE_MS = 300.0
DEADLINE_HEADER = "X-Deadline-Ms"

#: Section categories a search may be restricted to: ``medretrieve.corpus.chunking.SECTION_CATEGORIES`` and
#: ``other`` (a test keeps the two lists equal; the server must not load the chunker to check a request).
Section = Literal["treatment", "symptoms", "diagnosis", "etiology", "prognosis", "background", "methods", "results",
                  "conclusions", "other"]
SECTIONS = get_args(Section)

#: Every ``error.type`` the API answers, with its status (the table of ``docs/serving.md``).
ERROR_TYPES: Dict[str, int] = {
    "invalid_json": 400, "unauthorized": 401, "insufficient_scope": 403, "reload_disabled": 403, "not_found": 404, "method_not_allowed": 405,
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
                                examples=["Which drugs lower serum urate in gout?"],  # what "Try it out" fills in
                                json_schema_extra={"pattern": WORD_PATTERN})]
#: The same question with its word rule applied, for a question checked outside the request models (the MCP tools'
#: arguments): one rule and one limit, whichever door the question comes in by.
WordedQuestion = Annotated[Question, AfterValidator(_question)]


#: The stage switches of a search, by the names its stage log gives the stages (``SearchResult.stages``), in the
#: order the stages run.
STAGE_SWITCHES = ("expand", "route", "dense", "bm25", "feedback", "rerank", "mmr", "recovery")


class Stages(_Strict):
    """Search stages a request may switch on or off, by their names in the stage log (for ablations and cheaper
    searches). Not given (or null): the retriever's setting: on, except ``mmr``, ``feedback`` and ``recovery``,
    which follow ``Settings.mmr`` / ``Settings.feedback`` / ``Settings.recovery`` (MMR off; feedback only without a
    learned ranker; recovery only with an online source). ``dense`` and ``bm25`` are not both off (the schema says
    so too)."""

    model_config = ConfigDict(extra="forbid", strict=True, json_schema_extra={"not": {
        "required": ["dense", "bm25"],
        "properties": {"dense": {"const": False}, "bm25": {"const": False}}}})

    expand: Optional[bool] = Field(default=None, description="query variants: training-memory terms, LLM synonyms")
    route: Optional[bool] = Field(default=None, description="section routing for treatment / symptom / test intents")
    dense: Optional[bool] = Field(default=None, description="dense (vector) first stage")
    bm25: Optional[bool] = Field(default=None, description="BM25 (lexical) first stage")
    feedback: Optional[bool] = Field(default=None, description="pseudo-relevance feedback (default: only without "
                                                               "a learned ranker)")
    rerank: Optional[bool] = Field(default=None, description="rerank: learned ranker, cross-encoder or formula")
    mmr: Optional[bool] = Field(default=None, description="MMR diversification of the hits (default off)")
    recovery: Optional[bool] = Field(default=None, description="a second search, with wider and relaxed queries, "
                                     "for a question whose first search found little (replaces its weakest hits)")

    @model_validator(mode="after")
    def _one_first_stage(self) -> "Stages":
        if self.dense is False and self.bm25 is False:
            raise ValueError(_ONE_FIRST_STAGE)
        return self


_ONE_FIRST_STAGE = "at least one of dense and bm25 must be on"


#: what ``where`` is, in the schema and the doors' help (the language: :mod:`medretrieve.filters`)
WHERE_DESCRIPTION = (
    "metadata filter every hit must pass (absent: none): text, e.g. 'year >= 2015 and publication_type in "
    "(Review, \"Randomized Controlled Trial\") and not retracted' (==, !=, <, <=, >, >=, in (...), not in (...), a "
    "bare boolean field, and / or / not, parentheses), or its JSON form: {\"field\": F, \"op\": OP, \"value\": V} "
    "with OP one of ==, !=, <, <=, >, >=, in, not_in (a list value), is_true (no value), or {\"and\": [...]}, "
    "{\"or\": [...]}, {\"not\": {...}}. Fields are the collection's metadata (GET /v1/collection lists them); "
    "an unknown field or a value of the wrong type is refused naming the field")


def _readable_filter(value: Any) -> Any:
    """A ``where`` checked before the union's own checks, so that a wrong value gets one message naming where, not
    one per branch of the union."""
    if value is not None:
        if not isinstance(value, (str, dict)):
            raise ValueError(f"must be a filter: its text or its JSON form (an object), got {type(value).__name__}")
        try:
            parse_filter(value)
        except FilterError as exc:  # a 422 naming where (field_errors adds the name)
            raise ValueError(str(exc).removeprefix("where: ").removeprefix("where ")) from None
    return value


#: the filter of a request: its text form or its JSON form (:mod:`medretrieve.filters`)
Where = Optional[Union[Annotated[str, Field(max_length=MAX_FILTER_CHARS)], Dict[str, Any]]]
MAX_FACETS = 16  # fields one facets request may count
#: a recency prior's half-life (years), as a request gives it
RecencyHalfLife = Optional[Annotated[float, Field(gt=0, le=1000, allow_inf_nan=False)]]


class SearchOptions(_Strict):
    """The search request, declared once: what a search returns and how long it may take. Every door is built from
    it or checked against it (:data:`SEARCH_OPTIONS`, :func:`check_search_options`); a field not given means the
    retriever's setting, never a default of the door's own."""

    # (null as absent: None means "not given" on every door)
    k: Optional[Annotated[int, Field(ge=1, le=MAX_K), BeforeValidator(_whole_number)]] = Field(
        DEFAULT_K, description="hits to return", json_schema_extra={"x-unit": "hits"})
    deadline_ms: Optional[DeadlineMs] = Field(
        None, description="budget (ms) from the request's arrival, queueing included; the server's default when "
                          "absent. The X-Deadline-Ms header may set it too (the smaller one counts).",
        json_schema_extra={"x-unit": "ms"})
    # (the bounds before the validator: after it, pydantic writes them to the schema as "ge"/"le")
    per_document: Optional[Annotated[int, Field(ge=1, le=MAX_K), BeforeValidator(_whole_number)]] = Field(
        None, description="most hits from one document (absent: no cap)", json_schema_extra={"x-unit": "hits"})
    sections: Optional[List[Section]] = Field(
        None, min_length=1, description="section categories every hit must come from (absent: all)")
    where: Where = Field(
        None, description=WHERE_DESCRIPTION, examples=["year >= 2015 and publication_type in (Review, "
                                                        "\"Randomized Controlled Trial\")"])
    include_retracted: Optional[bool] = Field(
        None, description="keep retracted articles (absent: false: a collection that records retraction leaves "
                          "them out)")
    evidence_prior: Optional[bool] = Field(
        None, description="order by evidence level too: practice guideline > systematic review / meta-analysis > "
                          "randomized trial > cohort > case report, by the documents' publication_type (absent: "
                          "off; its effect on quality is not measured)")
    recency_half_life: RecencyHalfLife = Field(
        None, description="order by recency too: a document's weight halves every this many years of age, by its "
                          "year (absent: off; its effect on quality is not measured)",
        json_schema_extra={"x-unit": "years"})
    stages: Stages = Field(default_factory=Stages)
    explain: bool = Field(False, description="add each stage's reason (the ranker's provenance included) and each "
                                             "hit's per-stage scores to the response")

    _readable_filter = field_validator("where", mode="before")(lambda value: _readable_filter(value))

    def search_kwargs(self) -> Dict[str, Any]:
        """Keyword arguments of ``Retriever.search`` (all but the question and the deadline): only the options
        the request gave, so that the rest are the retriever's own settings."""
        given = {name: getattr(self, name) for name in self.model_fields_set & _SEARCH_FIELDS}
        given.update(self.stages.model_dump(exclude_none=True))
        return {name: value for name, value in given.items() if value is not None}


_SEARCH_FIELDS = {"k", "per_document", "sections", "where", "include_retracted", "evidence_prior",
                  "recency_half_life"}


@dataclass(frozen=True)
class SearchOption:
    """One option of a search request, as :class:`SearchOptions` declares it (JSON Schema terms): ``type`` of a
    given value (``integer``, ``number``, ``boolean``, ``array``), its bounds (``minimum``, ``maximum``,
    ``exclusive_minimum``), ``unit`` (``ms``, ``hits``), an array's allowed ``items`` and ``min_items``,
    ``default`` (None: the retriever's setting) and ``stage``: a stage switch (over HTTP, in ``stages``)."""

    name: str
    type: str
    description: str
    default: Any = None
    unit: Optional[str] = None
    minimum: Optional[float] = None
    maximum: Optional[float] = None
    exclusive_minimum: Optional[float] = None
    items: Optional[Tuple[str, ...]] = None
    min_items: Optional[int] = None
    stage: bool = False

    def json_schema(self) -> Dict[str, Any]:
        """The option's JSON Schema (standard keywords only; a given value, so no null)."""
        if self.type == "filter":
            return {"anyOf": [{"type": "string", "minLength": 1, "maxLength": MAX_FILTER_CHARS},
                              {"type": "object"}], "description": self.description}
        out: Dict[str, Any] = {"type": self.type, "description": self.description}
        for key, value in (("minimum", self.minimum), ("maximum", self.maximum),
                           ("exclusiveMinimum", self.exclusive_minimum), ("minItems", self.min_items)):
            if value is not None:
                out[key] = value
        if self.items is not None:
            out["items"] = {"type": "string", "enum": list(self.items)}
        if self.default is not None:
            out["default"] = self.default
        return out


def _option(name: str, schema: Mapping[str, Any], stage: bool) -> SearchOption:
    """The :class:`SearchOption` of one property of a model's JSON schema (``anyOf [X, null]`` read as X)."""
    alternatives = [s for s in schema.get("anyOf", [schema]) if s.get("type") != "null"]
    body = alternatives[0]
    items = body.get("items", {})
    return SearchOption(name, body["type"], schema.get("description", ""), schema.get("default"),
                        schema.get("x-unit"), body.get("minimum"), body.get("maximum"), body.get("exclusiveMinimum"),
                        tuple(items["enum"]) if "enum" in items else None, body.get("minItems"), stage)


def _listing() -> Dict[str, SearchOption]:
    schema = SearchOptions.model_json_schema()
    fields = {name: _option(name, prop, False) for name, prop in schema["properties"].items()
              if name in _SEARCH_FIELDS or name == "deadline_ms"}
    # (the sections' items are a $ref to the Section enum)
    sections = fields["sections"]
    fields["sections"] = SearchOption(**{**vars(sections), "items": SECTIONS})
    # (a filter is a string or an object: one type of its own, "filter", whose schema says both)
    fields["where"] = SearchOption("where", "filter", WHERE_DESCRIPTION)
    stages = {name: _option(name, prop, True) for name, prop in Stages.model_json_schema()["properties"].items()}
    return {**fields, **stages}


#: Every option of a search (keyword arguments of ``Retriever.search``, ``Client.search``, flags of
#: ``medretrieve search``, fields of ``POST /v1/search``; stage switches in its ``stages``), name -> option, read
#: from :class:`SearchOptions` and :class:`Stages`: the doors are built from it or checked against it by tests.
SEARCH_OPTIONS: Mapping[str, SearchOption] = MappingProxyType(_listing())


class SearchOptionError(Exception):
    """A search option (or the question) a door refuses; ``option``: its name (``stages`` for the rule over dense
    and bm25)."""

    def __init__(self, message: str, option: str) -> None:
        super().__init__(message)
        self.option = option

    def __reduce__(self) -> Any:  # pickled whole (a Ray handle, a process pool re-raise it), not as message only
        return type(self), (str(self), self.option)


class SearchOptionTypeError(SearchOptionError, TypeError):
    """An unknown (misspelt) search option, or one of the wrong type."""


class SearchOptionValueError(SearchOptionError, ValueError):
    """A search option out of its bounds."""


def check_search_options(options: Mapping[str, Any]) -> Dict[str, Any]:
    """``options`` (search keyword arguments: :data:`SEARCH_OPTIONS`' names) checked as the server checks a request,
    for the doors that take Python values: the options given (None: not given, dropped), integers as ``int``,
    ``sections`` as a list.

    Strict as the server: :class:`SearchOptionTypeError` (a TypeError) for an unknown (or misspelt) name or a value
    of the wrong type (``"5"`` and ``True`` are not integers, ``"300"`` not a number; numpy integers are integers,
    and a whole float such as ``5.0`` one, as JSON Schema says); :class:`SearchOptionValueError` (a ValueError) for
    a value out of bounds, an unknown section, or ``dense`` and ``bm25`` both off. Each names the option, in its
    message and its ``option``.
    """
    unknown = sorted(set(options) - set(SEARCH_OPTIONS))
    if unknown:
        raise SearchOptionTypeError(f"unknown search option{'s' if len(unknown) > 1 else ''} {', '.join(unknown)}; "
                                    f"known: {', '.join(SEARCH_OPTIONS)}", unknown[0])
    given = {name: _checked(SEARCH_OPTIONS[name], value) for name, value in options.items() if value is not None}
    if given.get("dense") is False and given.get("bm25") is False:
        raise SearchOptionValueError(_ONE_FIRST_STAGE, "stages")
    return given


def check_question(question: Any) -> str:
    """A search's question checked as the server checks it (:data:`WordedQuestion`: a string of at most
    ``MAX_QUESTION_CHARS`` characters that holds a letter or a digit): :class:`SearchOptionTypeError` for one
    that is not a string, :class:`SearchOptionValueError` for a blank, word-less or too long one; both name
    ``question``."""
    if not isinstance(question, str):
        raise SearchOptionTypeError(f"question must be a string, got {type(question).__name__}", "question")
    if len(question) > MAX_QUESTION_CHARS:
        raise SearchOptionValueError(f"question must be at most {MAX_QUESTION_CHARS} characters, got "
                                     f"{len(question)}", "question")
    try:
        return _question(question)
    except ValueError as exc:
        raise SearchOptionValueError(f"question {exc}", "question") from None


def _checked(option: SearchOption, value: Any) -> Any:
    name, kind = option.name, option.type

    def wrong(what: str) -> SearchOptionTypeError:
        return SearchOptionTypeError(f"{name} must be {what}, got {value!r}", name)

    def outside(what: str) -> SearchOptionValueError:
        return SearchOptionValueError(f"{name} must be {what}, got {value!r}", name)

    if kind == "filter":
        if not isinstance(value, (str, Mapping, Filter)):
            raise wrong("a filter: its text or its JSON form (an object)")
        try:
            parsed = parse_filter(value)
        except FilterError as exc:
            raise SearchOptionValueError(str(exc), name) from None
        return parsed.text() if isinstance(value, Filter) else value
    if kind == "boolean":
        if not isinstance(value, bool):
            raise wrong("true or false (a bool)")
        return value
    if kind == "array":
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or \
                not all(isinstance(item, str) for item in value):
            raise wrong("a list of names")
        if option.min_items is not None and len(value) < option.min_items:
            raise outside(f"a list of at least {option.min_items}")
        unknown = [item for item in value if option.items is not None and item not in option.items]
        if unknown:
            raise outside(f"of {', '.join(option.items or ())} (unknown: {', '.join(unknown)})")
        return list(value)
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise wrong("an integer" if kind == "integer" else "a number")
    if not math.isfinite(value):
        raise outside("a finite number")
    if kind == "integer":
        if isinstance(value, numbers.Integral):
            value = operator.index(value)
        elif float(value).is_integer():
            value = int(float(value))
        else:
            raise outside("a whole number")
    low, high, above = option.minimum, option.maximum, option.exclusive_minimum
    if (low is not None and value < low) or (high is not None and value > high) or \
            (above is not None and value <= above):
        start = f"({above:g}" if above is not None else f"[{low:g}"
        raise outside(f"in {start}, {high:g}]" + (f" {option.unit}" if option.unit else ""))
    return value


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


#: The options of a search that choose and weigh its documents (the metadata filter, retracted articles, the
#: priors): an answer's retrieval takes them too (:class:`AnswerRequest`), as :class:`SearchOptions` declares them.
FILTER_OPTIONS = ("where", "include_retracted", "evidence_prior", "recency_half_life")


def _declared(name: str) -> Any:
    """:class:`SearchOptions`' own declaration of option ``name`` (description, default, unit), for another request
    that takes the option: one declaration, not a copy (its type: the same alias, checked by a test)."""
    return copy.copy(SearchOptions.model_fields[name])  # (pydantic sets a model's own field info as it builds it)


class AnswerRequest(_Strict):
    """``POST /v1/answer``: e.g. ``{"question": "Is metformin first-line for type 2 diabetes?", "k": 5}``; the
    evidence is searched with the request's :data:`FILTER_OPTIONS` (``"where": "year >= 2015"``), as a search is."""

    question: Question
    k: Integer = Field(DEFAULT_K, ge=1, le=MAX_K, description="evidence passages to retrieve")
    deadline_ms: Optional[DeadlineMs] = Field(None, description="budget (ms) for queueing, retrieval and generation")
    qtype: Optional[BioASQType] = Field(
        None, description="ask for an exact answer of this BioASQ type (default: the detected question type)")
    mode: Literal["cite", "answer_only", "bioasq"] = Field(
        "cite", description="cite: numbered sources and checked [n] citations; answer_only: the bare answer; "
                            "bioasq: exact + ideal answer. Without an LLM the answer is extractive: cite only")
    max_tokens: Integer = Field(512, ge=1, le=8192)
    stream: bool = Field(False, description="answer as server-sent events: evidence, text deltas, the answer")
    explain: bool = Field(False, description="add each evidence hit's per-stage scores")
    where: Where = _declared("where")
    include_retracted: Optional[bool] = _declared("include_retracted")
    evidence_prior: Optional[bool] = _declared("evidence_prior")
    recency_half_life: RecencyHalfLife = _declared("recency_half_life")
    _check_question = field_validator("question")(_question)
    _readable_filter = field_validator("where", mode="before")(lambda value: _readable_filter(value))

    def filter_kwargs(self) -> Dict[str, Any]:
        """The :data:`FILTER_OPTIONS` the request gave (keyword arguments of ``Answerer.answer`` and
        ``Retriever.search``): the rest are the retriever's own settings."""
        given = {name: getattr(self, name) for name in self.model_fields_set & set(FILTER_OPTIONS)}
        return {name: value for name, value in given.items() if value is not None}


class FacetsRequest(_Strict):
    """``POST /v1/facets``: counts per value of metadata fields over the collection's documents that pass a filter,
    e.g. ``{"fields": ["year", "publication_type"], "where": "year >= 2015"}``."""

    fields: List[Annotated[str, Field(min_length=1, max_length=100)]] = Field(
        ..., min_length=1, max_length=MAX_FACETS, description="metadata fields to count (GET /v1/collection "
                                                               "lists them under metadata)")
    where: Where = Field(None, description=WHERE_DESCRIPTION)
    include_retracted: Optional[bool] = Field(None, description="count retracted articles too")
    top: Optional[Annotated[int, Field(ge=1, le=1000), BeforeValidator(_whole_number)]] = Field(
        None, description="most values per field, most frequent first (absent: all)")
    _readable_filter = field_validator("where", mode="before")(lambda value: _readable_filter(value))


class FacetCount(BaseModel):
    value: Any
    count: int = Field(description="documents holding the value (a date counts by its year)")


class FacetsResponse(BaseModel):
    """Documents passing the filter, and each field's counts, most frequent first."""

    documents: int
    facets: Dict[str, List[FacetCount]]


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
