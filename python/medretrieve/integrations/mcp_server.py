"""medretrieve as an MCP server for agents (the ``mcp`` extra: the official Python SDK, ``mcp``).

Two tools, both read-only, both answering structured content with a typed output schema:

- ``search(question, k, sections)``: the best chunks (:class:`SearchOutput`: hits with text, score, document id,
  title, section, BioASQ span and source link; whether the question is weak; stages the deadline cut).
- ``answer(question, k)``: a cited answer (:class:`AnswerOutput`: the text with ``[n]`` marks, each sentence's
  citation check, the numbered sources the marks point at), written by the LLM backend the server was started
  with, or extractive (the evidence's own sentences) without one.

``build_server(engine)`` makes the ``MCPServer``; :class:`Engine` does the work over a local collection (a
:class:`~medretrieve.retrieval.retriever.Retriever`, optionally with an LLM backend) or over a running
``medretrieve serve`` (a :class:`~medretrieve.client.Client`, which answers with the server's own backend).
``medretrieve mcp COLLECTION`` serves it over stdio, or over streamable HTTP with ``--http``.
The tools run in worker threads; each search is bounded by the engine's ``deadline_ms``, each answer by its
``answer_deadline_ms``.
"""
from __future__ import annotations

import contextlib
from typing import Annotated, Any, Iterator, List, Optional, Sequence, Tuple, Type

import anyio
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import ToolAnnotations
from pydantic import BaseModel, Field

from .._version import __version__
from ..records import Answer, Hit, SearchResult
from ..wire import MAX_K, Integer, Section, WordedQuestion
from .source import SPAN_KEYS, SearchCall, Searcher, source_url


class Span(BaseModel):
    """Where a hit's text sits in its source document (BioASQ snippet fields; offsets in characters, end
    exclusive)."""

    beginSection: str
    endSection: str
    offsetInBeginSection: int
    offsetInEndSection: int


class HitOutput(BaseModel):
    """One retrieved chunk. ``number``: its place in the list, 1-based (what an answer's ``[n]`` marks name)."""

    number: int
    document_id: str
    chunk_id: str
    title: str
    section: str
    text: str
    score: float = Field(description="relevance (higher is better; the final ranking's score)")
    source_url: Optional[str] = Field(None, description="link to the source (the PubMed page of a PMID)")
    span: Optional[Span] = Field(None, description="the text's place in its source, when the collection knows it")


class SearchOutput(BaseModel):
    question: str
    query_type: str = Field(description="yesno, factoid, list or summary")
    weak: bool = Field(description="the evidence matches the question poorly (reasons in weak_reasons)")
    weak_reasons: List[str]
    cut: List[str] = Field(description="stages the deadline cut short or skipped")
    hits: List[HitOutput]


class CitationOutput(BaseModel):
    sentence: str
    sources: List[int] = Field(description="the source numbers the sentence cites")
    supported: bool = Field(description="the cited sources support the sentence")


class AnswerOutput(BaseModel):
    question: str
    text: str = Field(description="the answer, citing sources as [n]")
    abstained: bool = Field(description="no answer: the evidence was too weak (reason in abstain_reason)")
    abstain_reason: str
    error: Optional[str] = Field(None, description="the LLM failed (the answer is then empty)")
    citations: List[CitationOutput]
    sources: List[HitOutput] = Field(description="the numbered evidence the [n] marks point at")
    notes: List[str]


def hit_output(number: int, hit: Hit) -> HitOutput:
    span = hit.span if hit.span and all(hit.span.get(key) is not None for key in SPAN_KEYS) else None
    return HitOutput(number=number, document_id=hit.document_id, chunk_id=hit.chunk_id, title=hit.title,
                     section=hit.section, text=hit.text, score=float(hit.score),
                     source_url=source_url(hit.document_id, hit.metadata),
                     span=Span(**{key: span[key] for key in SPAN_KEYS}) if span else None)


def search_output(result: SearchResult) -> SearchOutput:
    return SearchOutput(question=result.question, query_type=result.query_type, weak=result.weak,
                        weak_reasons=list(result.weak_reasons), cut=result.cut,
                        hits=[hit_output(n, h) for n, h in enumerate(result.hits, 1)])


def answer_output(ans: Answer) -> AnswerOutput:
    used = ans.evidence[:ans.sources_used] if ans.sources_used else ans.evidence
    return AnswerOutput(question=ans.question, text=ans.text, abstained=ans.abstained,
                        abstain_reason=ans.abstain_reason, error=ans.error,
                        citations=[CitationOutput(sentence=c.sentence, sources=list(c.sources), supported=c.supported)
                                   for c in ans.citations],
                        sources=[hit_output(n, h) for n, h in enumerate(used, 1) if isinstance(h, Hit)],
                        notes=list(ans.notes))


class Engine:
    """What the tools call. ``source``: a Retriever, a Client, a collection folder or a server URL
    (:class:`~.source.Searcher`); ``backend``: an LLM backend (:mod:`medretrieve.generation.llm`) for answers
    over a local collection (None: extractive; a server answers with its own). ``deadline_ms``: each search's
    budget (ms); ``answer_deadline_ms``: each answer's, retrieval and generation together (ms)."""

    def __init__(self, source: Any, backend: Any = None, *, deadline_ms: Optional[float] = 300.0,
                 answer_deadline_ms: Optional[float] = 60_000.0) -> None:
        self.searcher = Searcher(source)
        self.remote = callable(getattr(self.searcher.target, "answer", None))
        refusal: Optional[Exception] = None
        if self.searcher.is_async:
            refusal = TypeError("the MCP engine needs a sync source (a Retriever or a Client), not an AsyncClient")
        elif self.remote and backend is not None:
            refusal = ValueError("a medretrieve server answers with the LLM it was started with; an LLM backend "
                                 "goes with a local collection only")
        if refusal is not None:
            self.searcher.close()
            raise refusal
        self.backend = backend
        self.deadline_ms = deadline_ms
        self.answer_deadline_ms = answer_deadline_ms

    def search(self, question: str, k: int, sections: Optional[Sequence[str]]) -> SearchResult:
        with self._told():
            return self.searcher.search(question, SearchCall(k, self.deadline_ms, sections))

    def answer(self, question: str, k: int) -> Answer:
        with self._told():
            if self.remote:
                remote: Answer = self.searcher.target.answer(question, k=k, deadline_ms=self.answer_deadline_ms)
                return remote
            from ..generation.generate import Answerer  # the engine: loaded for a local collection only

            answerer = Answerer(self.searcher.target, self.backend, k=k)
            return answerer.answer(question, deadline_ms=self.answer_deadline_ms)

    @contextlib.contextmanager
    def _told(self) -> Iterator[None]:
        """Failures the caller can act on (bad input; a server that refused or could not be reached) as a
        ToolError, whose message the agent reads (the SDK hides the message of any other exception)."""
        kinds: Tuple[Type[Exception], ...] = (ValueError,)
        if self.remote:
            from ..client.errors import ClientError

            kinds += (ClientError,)
        try:
            yield
        except kinds as exc:
            raise ToolError(str(exc)) from exc

    def close(self) -> None:
        self.searcher.close()


Question = Annotated[WordedQuestion, Field(description="the question, in plain words (the HTTP API's rule and limit)")]
# strict, as the HTTP API: "3" or true is no count of hits (2.0 is: Integer takes a whole float)
HitCount = Annotated[Integer, Field(ge=1, le=MAX_K, strict=True, description="how many hits (chunks) to return")]
Sections = Annotated[Optional[List[Section]], Field(min_length=1, description="section categories every hit must "
                                                                          "come from (default: all)")]
EvidenceCount = Annotated[Integer, Field(ge=1, le=MAX_K, strict=True,
                                         description="how many evidence passages to read")]


def build_server(engine: Engine, *, name: str = "medretrieve", default_k: int = 10) -> MCPServer:
    """The MCP server with the ``search`` and ``answer`` tools over ``engine`` (module docstring)."""
    server: MCPServer = MCPServer(
        name, version=__version__, log_level="WARNING",
        instructions="Medical literature retrieval. `search` returns evidence passages with their sources; "
                     "`answer` writes an answer that cites them as [n] (sources[n-1]) and checks each citation.")
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)

    @server.tool(annotations=read_only)
    async def search(question: Question, k: HitCount = default_k, sections: Sections = None) -> SearchOutput:
        """Search the medical collection: the best passages for the question, each with its source."""
        result = await anyio.to_thread.run_sync(engine.search, question, k, sections)
        return search_output(result)

    @server.tool(annotations=read_only)
    async def answer(question: Question, k: EvidenceCount = default_k) -> AnswerOutput:
        """Answer the question from the collection, citing the sources as [n] and checking each citation."""
        return answer_output(await anyio.to_thread.run_sync(engine.answer, question, k))

    return server
