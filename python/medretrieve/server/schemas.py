"""Request and response bodies of the HTTP API (pydantic), which also make its OpenAPI document.

Requests are strict: unknown fields, wrong types ("10" for an integer) and out-of-range values are refused with
422 and an error naming the field. Responses carry the library's own shapes: a search answers
``SearchResult.to_dict()`` and an answer ``Answer.to_dict()``, so ``SearchResult.from_dict`` /
``Answer.from_dict`` read them back.
"""
from __future__ import annotations

from typing import Any, Dict, List, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from ..retrieval.candidates import section_labels
from ..retrieval.results import SearchResult

MAX_K = 100  # most hits (or evidence passages) one request may ask for
MAX_BATCH = 64  # most questions in one /v1/search:batch (ServerConfig.max_batch may lower it)
MAX_DEADLINE_MS = 600_000.0
MAX_QUESTION_CHARS = 4000


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


def _question(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or blank")
    return value


class Stages(_Strict):
    """Search stages a request may switch off (all on by default; for ablations and cheaper searches)."""

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

    k: int = Field(10, ge=1, le=MAX_K, description="hits to return")
    deadline_ms: Optional[float] = Field(
        None, gt=0, le=MAX_DEADLINE_MS,
        description="budget (ms) from the request's arrival, queueing included; the server's default when absent. "
                    "The X-Deadline-Ms header may set it too (the smaller one counts).")
    per_document: Optional[int] = Field(None, ge=1, description="most hits from one document")
    sections: Optional[List[str]] = Field(
        None, min_length=1,
        description="section categories every hit must come from: treatment, symptoms, diagnosis, etiology, "
                    "prognosis, background, methods, results, conclusions, other")
    stages: Stages = Field(default_factory=Stages)

    @field_validator("sections")
    @classmethod
    def _known_sections(cls, value: Optional[List[str]]) -> Optional[List[str]]:
        if value is not None:
            section_labels(value)  # ValueError naming unknown sections
        return value

    def search_kwargs(self) -> Dict[str, Any]:
        """Keyword arguments of ``Retriever.search`` (all but the question and the deadline)."""
        return dict(k=self.k, per_document=self.per_document, sections=self.sections, **self.stages.model_dump())


class SearchRequest(SearchOptions):
    """``POST /v1/search``."""

    question: str = Field(..., min_length=1, max_length=MAX_QUESTION_CHARS)
    _check_question = field_validator("question")(_question)


class BatchSearchRequest(SearchOptions):
    """``POST /v1/search:batch``: several questions with the same options, one deadline for them all."""

    questions: List[str] = Field(..., min_length=1, max_length=MAX_BATCH)

    @field_validator("questions")
    @classmethod
    def _each_question(cls, value: List[str]) -> List[str]:
        for i, q in enumerate(value):
            if not q.strip() or len(q) > MAX_QUESTION_CHARS:
                raise ValueError(f"questions[{i}] must be a non-blank string of at most {MAX_QUESTION_CHARS} chars")
        return value


class AnswerRequest(_Strict):
    """``POST /v1/answer``."""

    question: str = Field(..., min_length=1, max_length=MAX_QUESTION_CHARS)
    k: int = Field(10, ge=1, le=MAX_K, description="evidence passages to retrieve")
    deadline_ms: Optional[float] = Field(None, gt=0, le=MAX_DEADLINE_MS,
                                         description="budget (ms) for queueing, retrieval and generation")
    qtype: Optional[Literal["yesno", "factoid", "list", "summary"]] = Field(
        None, description="ask for an exact answer of this BioASQ type (default: the detected question type)")
    mode: Literal["cite", "answer_only", "bioasq"] = "cite"
    max_tokens: int = Field(512, ge=1, le=8192)
    stream: bool = Field(False, description="answer as server-sent events: evidence, text deltas, the answer")
    _check_question = field_validator("question")(_question)


# ------------------------------------------------------------------ responses (documentation of the shapes)
# A search answers SearchResult.to_dict() and an answer Answer.to_dict(): the routes name those dataclasses as
# their response models, so the OpenAPI document shows the library's own types.

class BatchSearchResponse(BaseModel):
    """One ``SearchResult.to_dict()`` per question, in order."""

    results: List[SearchResult]


class ErrorDetail(BaseModel):
    type: str = Field(description="invalid_request, not_found, overloaded, deadline_exceeded, not_ready, "
                                  "answers_disabled, reload_disabled, reload_failed, internal_error")
    message: str
    field: Optional[str] = Field(None, description="the request field at fault (dotted path), when one is")


class ErrorResponse(BaseModel):
    error: ErrorDetail
