"""medretrieve as an MCP server for agents (the ``mcp`` extra: the official Python SDK, ``mcp``).

Two tools, both read-only, both answering structured content with a typed output schema:

- ``search``: the best chunks (:class:`SearchOutput`: hits with text, score, document id, title, section, BioASQ
  span and source link; whether the question is weak; the stage log). Its arguments are the body of ``POST
  /v1/search`` (:func:`search_input_schema`, built from the search declaration
  :data:`medretrieve.wire.SEARCH_OPTIONS`: ``question``, ``k``, ``deadline_ms``, ``per_document``, ``sections``,
  the stage switches under ``stages``), checked as the HTTP API checks that body.
- ``answer(question, k, where, include_retracted, evidence_prior, recency_half_life, all_sources)``: a cited
  answer from evidence searched with those options, as ``search`` takes them (:class:`AnswerOutput`: the text with
  ``[n]`` marks, each sentence's citation check, the numbered sources worth showing, each with its document's year
  and publication types where recorded: those the marks point at and any uncited one scoring at least the relevance
  floor, ``Answer.shown_sources``; every source read with ``all_sources``, as the CLI's ``--all-sources``), written by the LLM backend the server was started with, or extractive (the evidence's
  own sentences) without one.

``build_server(engine)`` makes the ``MCPServer``; :class:`Engine` does the work over a local collection (a
:class:`~medretrieve.retrieval.retriever.Retriever`, optionally with an LLM backend) or over a running
``medretrieve serve`` (a :class:`~medretrieve.client.Client`, which answers with the server's own backend).
Arguments are checked by the tools as the HTTP API checks a request, never coerced (``"3"`` is no ``k``, a JSON
string no list): an unknown or misspelt argument, a value of the wrong type or out of bounds is a tool error that
names it. A result is its structured content (the output schema) beside a short plain-text summary.
``medretrieve mcp COLLECTION`` serves it over stdio (:mod:`.mcp_transport`: every request line gets a reply, a
broken one a JSON-RPC error), or over streamable HTTP with ``--http``.

The tools run in worker threads, searches and answers in pools of their own, so that a search never waits for a
thread behind answers that wait on a slow LLM. Each search is bounded by the engine's ``deadline_ms``, each answer
by its ``answer_deadline_ms``. At most ``answer_concurrency`` answers are written at once: one more is refused at
once with a tool error that says so (as ``medretrieve serve --answer-concurrency`` answers 429). A call its caller
cancels cancels its answer: the LLM request is closed at once (a backend that streams with a
:class:`~medretrieve.generation.llm.Cancel`; a remote server's answer at its next event), and its slot is free
again when the work has stopped.
"""
from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import (Annotated, Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Set, Tuple, Type,
                    TypeVar)

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.mcpserver.tools import Tool
from mcp.server.mcpserver.utilities.func_metadata import ArgModelBase
from mcp.types import CallToolResult, TextContent, ToolAnnotations
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette

from .._version import __version__
from ..generation.llm import Cancel, LLMCancelled, StreamingBackend
from ..records import Answer, Hit, SearchResult, source_facts
from ..wire import (FILTER_OPTIONS, MAX_DEADLINE_MS, MAX_QUESTION_CHARS, SEARCH_OPTIONS, AnswerRequest, SearchRequest,
                    field_errors)
from .mcp_transport import EveryBodyAnswered, serve_stdio
from .source import SPAN_KEYS, SearchCall, Searcher, source_url

SEARCH_THREADS = 4  # searches worked at once (CPU-bound: more threads than cores only queue inside the engine)
ANSWER_CONCURRENCY = 8  # answers written at once by default, as medretrieve serve's --answer-concurrency
CLIENT_GRACE_S = 1.0  # a client opened from a URL waits this long past a budget (s; the client's own grace)
NO_DEADLINE_WAIT_S = MAX_DEADLINE_MS / 1000.0  # its wait for a reply with no budget (s): the longest budget there is


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
    placed_by: Optional[str] = Field(None, description="set when a later stage put the hit in its place rather "
                                     "than its score: \"recovery\", a second search for a question whose first "
                                     "search found little")
    source_url: Optional[str] = Field(None, description="link to the source (the PubMed page of a PMID)")
    span: Optional[Span] = Field(None, description="the text's place in its source article (MEDLINE, BioASQ); "
                                                   "null when its source gave no sections")
    year: Optional[int] = Field(None, description="the document's publication year (null when the collection "
                                                  "does not record it)")
    publication_type: Optional[List[str]] = Field(None, description="the document's publication types, e.g. "
                                                  "Review, Randomized Controlled Trial (null when not recorded)")


class StageOutput(BaseModel):
    """One stage of the search, as its stage log gives it."""

    name: str
    ran: bool
    cut: bool = Field(description="the deadline cut the stage short or skipped it")


class SearchOutput(BaseModel):
    question: str
    query_type: str = Field(description="yesno, factoid, list or summary")
    weak: bool = Field(description="the evidence matches the question poorly (reasons in weak_reasons)")
    weak_reasons: List[str]
    cut: List[str] = Field(description="stages the deadline cut short or skipped")
    stages: List[StageOutput] = Field(description="the search's stages in the order they ran or were skipped (the "
                                                  "names of the stage switches)")
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
    sources: List[HitOutput] = Field(description="the numbered evidence worth showing: the sources the [n] marks "
                                                 "point at and any other scoring at least the relevance floor "
                                                 "(every source read with all_sources); each keeps its number")
    more_sources: int = Field(0, description="sources read but not listed: not cited and below the relevance floor "
                                             "(all_sources=true lists them)")
    notes: List[str]


def hit_output(number: int, hit: Hit) -> HitOutput:
    span = hit.span if hit.span and all(hit.span.get(key) is not None for key in SPAN_KEYS) else None
    return HitOutput(number=number, document_id=hit.document_id, chunk_id=hit.chunk_id, title=hit.title,
                     section=hit.section, text=hit.text, score=float(hit.score), placed_by=hit.placed_by,
                     source_url=source_url(hit.document_id, hit.metadata),
                     span=Span(**{key: span[key] for key in SPAN_KEYS}) if span else None,
                     **source_facts(hit.metadata))


def search_output(result: SearchResult) -> SearchOutput:
    return SearchOutput(question=result.question, query_type=result.query_type, weak=result.weak,
                        weak_reasons=list(result.weak_reasons), cut=result.cut,
                        stages=[StageOutput(name=s.name, ran=s.ran, cut=s.cut) for s in result.stages],
                        hits=[hit_output(n, h) for n, h in enumerate(result.hits, 1)])


def search_summary(out: SearchOutput) -> str:
    """The plain-text line an agent reads beside the structured result: how many passages, from where."""
    if not out.hits:
        return "No passages found."
    found = "; ".join(f"[{h.number}] {h.title} ({h.section})" for h in out.hits)
    weak = f" The evidence matches the question poorly: {'; '.join(out.weak_reasons)}." if out.weak else ""
    return f"{len(out.hits)} passages (text, scores and sources in the structured result): {found}.{weak}"


def answer_summary(out: AnswerOutput) -> str:
    """The plain-text answer beside the structured one: its text, or why there is none."""
    if out.error:
        return f"No answer: {out.error}"
    if out.abstained:
        return f"No answer: {out.abstain_reason}"
    return out.text


def answer_output(ans: Answer, all_sources: bool = False) -> AnswerOutput:
    """The tool's answer: the sources worth showing (:meth:`~medretrieve.records.Answer.sources_to_show`), or
    every source read with ``all_sources``, each under the number the answer's marks use."""
    used = ans.evidence[:ans.sources_used] if ans.sources_used else ans.evidence
    numbers = ans.sources_to_show(all_sources)
    sources = [hit_output(n, used[n - 1]) for n in numbers if isinstance(used[n - 1], Hit)]
    return AnswerOutput(question=ans.question, text=ans.text, abstained=ans.abstained,
                        abstain_reason=ans.abstain_reason, error=ans.error,
                        citations=[CitationOutput(sentence=c.sentence, sources=list(c.sources), supported=c.supported)
                                   for c in ans.citations],
                        sources=sources, more_sources=len(used) - len(numbers), notes=list(ans.notes))


class Busy(ToolError):
    """An answer refused because ``answer_concurrency`` answers are being written (the caller may try again)."""


class AnswerSlots:
    """Room for ``limit`` answers at once: :meth:`take` says whether one more fits (never waits); a slot is given
    back when its work has stopped, from whichever thread it stopped in."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"answer_concurrency must be >= 1, got {limit}")
        self.limit = limit
        self.busy = 0
        self._lock = threading.Lock()

    def take(self) -> bool:
        with self._lock:
            if self.busy >= self.limit:
                return False
            self.busy += 1
            return True

    def give_back(self) -> None:
        with self._lock:
            self.busy -= 1


class _Cancellable:
    """An LLM backend whose generation stops when ``cancel`` is set: streamed with the cancel when the backend can
    stream (its request is closed at once), else refused when the cancel came before it started."""

    def __init__(self, backend: Any, cancel: Cancel) -> None:
        self.backend = backend
        self.cancel = cancel

    def generate(self, messages: Sequence[dict], **options: Any) -> str:
        if self.cancel.is_set():
            raise LLMCancelled("the caller cancelled the answer before generation")
        if isinstance(self.backend, StreamingBackend):
            return "".join(self.backend.stream(messages, cancel=self.cancel, **options))
        text: str = self.backend.generate(messages, **options)
        return text


class Engine:
    """What the tools call. ``source``: a Retriever, a Client, a collection folder or a server URL
    (:class:`~.source.Searcher`); ``backend``: an LLM backend (:mod:`medretrieve.generation.llm`) for answers
    over a local collection (None: extractive; a server answers with its own). ``deadline_ms``: each search's
    budget (ms); ``answer_deadline_ms``: each answer's, retrieval and generation together (ms; a client opened
    here from a URL waits that long for an answer); ``answer_concurrency``: answers written at once, more are
    refused (:class:`Busy`); ``search_threads``: searches worked at once, in a pool apart from the answers'."""

    def __init__(self, source: Any, backend: Any = None, *, deadline_ms: Optional[float] = 300.0,
                 answer_deadline_ms: Optional[float] = 60_000.0, answer_concurrency: int = ANSWER_CONCURRENCY,
                 search_threads: int = SEARCH_THREADS) -> None:
        if search_threads < 1:
            raise ValueError(f"search_threads must be >= 1, got {search_threads}")
        self.answer_slots = AnswerSlots(answer_concurrency)
        # a URL's client waits for the longest call it is given, not the client's default 10 s
        self._client = _client_for(source, _client_wait_s(deadline_ms, answer_deadline_ms))
        self.searcher = Searcher(source if self._client is None else self._client)
        self.remote = callable(getattr(self.searcher.target, "answer", None))
        refusal: Optional[Exception] = None
        if self.searcher.is_async:
            refusal = TypeError("the MCP engine needs a sync source (a Retriever or a Client), not an AsyncClient")
        elif self.remote and backend is not None:
            refusal = ValueError("a medretrieve server answers with the LLM it was started with; an LLM backend "
                                 "goes with a local collection only")
        if refusal is not None:
            self._close_clients()
            raise refusal
        self.backend = backend
        self.deadline_ms = deadline_ms
        self.answer_deadline_ms = answer_deadline_ms
        self._pools = {"search": ThreadPoolExecutor(search_threads, thread_name_prefix="mr-mcp-search"),
                       "answer": ThreadPoolExecutor(answer_concurrency, thread_name_prefix="mr-mcp-answer")}
        self._answering: Set[Cancel] = set()  # the cancels of the answers at work, set by close()

    def search(self, question: str, options: Mapping[str, Any], deadline_ms: Optional[float] = None) -> SearchResult:
        """The search with ``options`` (keyword arguments of ``Retriever.search`` but the deadline: the search
        declaration's, checked) within ``deadline_ms`` (ms; None: the engine's ``deadline_ms``)."""
        with self._told():
            call = SearchCall.of(self.deadline_ms if deadline_ms is None else deadline_ms, **options)
            return self.searcher.search(question, call)

    def answer(self, question: str, k: int, cancel: Optional[Cancel] = None,
               filters: Optional[Mapping[str, Any]] = None) -> Answer:
        """The answer (blocking). ``cancel`` set from another thread stops it: a local LLM request is closed at
        once, a remote server's answer at its next event. ``filters``: the evidence's search options
        (:data:`medretrieve.wire.FILTER_OPTIONS`, checked: ``AnswerRequest.filter_kwargs()``)."""
        cancel = cancel or Cancel()
        given = dict(filters or {})
        with self._told():
            if self.remote:
                return self._remote_answer(question, k, cancel, given)
            from ..generation.generate import Answerer  # the engine: loaded for a local collection only

            backend = None if self.backend is None else _Cancellable(self.backend, cancel)
            answerer = Answerer(self.searcher.target, backend, k=k)
            return answerer.answer(question, deadline_ms=self.answer_deadline_ms, **given)

    def _remote_answer(self, question: str, k: int, cancel: Cancel, filters: Dict[str, Any]) -> Answer:
        target = self.searcher.target
        if not callable(getattr(target, "stream_answer", None)):
            remote: Answer = target.answer(question, k=k, deadline_ms=self.answer_deadline_ms, **filters)
            return remote
        events = target.stream_answer(question, k=k, deadline_ms=self.answer_deadline_ms, **filters)
        try:  # streamed: leaving the stream closes the connection, which cancels the server's generation
            for event in events:
                if cancel.is_set():
                    raise LLMCancelled("the caller cancelled the answer")
                if event.kind == "answer" and event.answer is not None:
                    return event.answer
        finally:
            events.close()
        raise ValueError("the server's answer stream ended without its answer")

    async def search_async(self, question: str, options: Mapping[str, Any], deadline_ms: Optional[float] = None
                           ) -> SearchResult:
        """:meth:`search` in the search pool (never behind answers)."""
        return await asyncio.wrap_future(self._pools["search"].submit(self.search, question, options, deadline_ms))

    async def answer_async(self, question: str, k: int, filters: Optional[Mapping[str, Any]] = None) -> Answer:
        """:meth:`answer` in the answer pool when a slot is free, else :class:`Busy` at once. Cancelled, it sets
        the answer's :class:`Cancel` and returns at once; the slot comes back when the work has stopped."""
        if not self.answer_slots.take():
            raise Busy(f"{self.answer_slots.limit} answers are being written, the most this server writes at once "
                       "(medretrieve mcp --answer-concurrency); try again when one has finished")
        cancel = Cancel()
        try:
            work: "Future[Answer]" = self._pools["answer"].submit(self.answer, question, k, cancel, filters)
        except BaseException:  # the pool is shut down (the server stops)
            self.answer_slots.give_back()
            raise
        self._answering.add(cancel)

        def ended(_: Any) -> None:  # run, failed, or cancelled before it started
            self._answering.discard(cancel)
            self.answer_slots.give_back()

        work.add_done_callback(ended)
        try:
            return await asyncio.wrap_future(work)
        except asyncio.CancelledError:
            cancel.set()
            work.cancel()
            raise

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
        """Stop the pools and the answers at work (their LLM requests closed: the process's exit waits for its
        threads), and close a client opened here."""
        for pool in self._pools.values():
            pool.shutdown(wait=False, cancel_futures=True)
        for cancel in list(self._answering):
            cancel.set()
        self._close_clients()

    def _close_clients(self) -> None:
        self.searcher.close()
        if self._client is not None:
            self._client.close()


def _client_for(source: Any, wait_s: float) -> Any:
    """A Client of the server an http(s) URL names, waiting ``wait_s`` (s) for a reply; None for other sources."""
    if not (isinstance(source, str) and source.startswith(("http://", "https://"))):
        return None
    from ..client.client import Client

    return Client(source, timeout_s=wait_s)


def _client_wait_s(deadline_ms: Optional[float], answer_deadline_ms: Optional[float]) -> float:
    """How long a client opened from a URL waits for one reply (s): the longer of the two budgets, plus the
    client's grace; :data:`NO_DEADLINE_WAIT_S` for a budget of None."""
    budgets = [NO_DEADLINE_WAIT_S if ms is None else ms / 1000.0 for ms in (deadline_ms, answer_deadline_ms)]
    return max(budgets) + CLIENT_GRACE_S


QUESTION_SCHEMA: Dict[str, Any] = {
    "type": "string", "minLength": 1, "maxLength": MAX_QUESTION_CHARS,
    "description": "the question, in plain words (it must hold a letter or a digit: the HTTP API's rule and limit)"}


def _object(properties: Dict[str, Any], **more: Any) -> Dict[str, Any]:
    return {"type": "object", "properties": properties, "additionalProperties": False, **more}


def search_input_schema(default_k: Optional[int] = None) -> Dict[str, Any]:
    """The ``search`` tool's published input schema, built from the search declaration
    (:data:`medretrieve.wire.SEARCH_OPTIONS`): the fields of ``POST /v1/search`` but ``explain``, the stage
    switches under ``stages``, in standard JSON Schema keywords. The question's word rule is checked by the tool
    (a Unicode-range pattern helps no agent). ``default_k``: the hits of a call that names no ``k`` (None: the
    declaration's)."""
    top: Dict[str, Any] = {}
    stages: Dict[str, Any] = {}
    for name, option in SEARCH_OPTIONS.items():
        (stages if option.stage else top)[name] = option.json_schema()
    if default_k is not None:
        top["k"]["default"] = default_k
    top["deadline_ms"]["description"] = "budget of this search (ms; the server's --deadline-ms when absent)"
    return _object({"question": QUESTION_SCHEMA, **top, "stages": _object(
        stages, description="stages to switch on or off, by their names in the stage log (absent: the "
                            "collection's setting)")}, required=["question"])


ALL_SOURCES_SCHEMA: Dict[str, Any] = {
    "type": "boolean", "default": False,
    "description": "list every source read, not only the cited ones and those scoring at least the relevance floor"}


def answer_input_schema(default_k: Optional[int] = None) -> Dict[str, Any]:
    """The ``answer`` tool's published input schema: the question, ``k`` (evidence passages to read, as the
    search declaration bounds it), the evidence's search options (:data:`medretrieve.wire.FILTER_OPTIONS`: the
    metadata filter ``where``, ``include_retracted``, the priors; as the ``search`` tool publishes them) and
    ``all_sources`` (every source read in the result, not only those worth showing)."""
    k = {**SEARCH_OPTIONS["k"].json_schema(), "description": "how many evidence passages to read"}
    if default_k is not None:
        k["default"] = default_k
    filters = {name: SEARCH_OPTIONS[name].json_schema() for name in FILTER_OPTIONS}
    return _object({"question": QUESTION_SCHEMA, "k": k, **filters, "all_sources": ALL_SOURCES_SCHEMA},
                   required=["question"])


M = TypeVar("M", bound=BaseModel)


def checked_arguments(arguments: Mapping[str, Any], model: Type[M], schema: Mapping[str, Any]) -> M:
    """A tool's arguments as ``model`` (the HTTP API's request body) reads them, strictly and with its messages;
    an argument the tool's ``schema`` does not list is refused too. ToolError naming each argument at fault."""
    unknown = sorted(set(arguments) - set(schema["properties"]))
    problems = [f"{name}: unknown argument" for name in unknown]
    if not problems:
        try:
            return model.model_validate(dict(arguments))
        except ValidationError as exc:
            problems = [str(error["message"]) for error in field_errors(exc.errors())]
    raise ToolError(f"{'; '.join(problems)} (the arguments: {', '.join(schema['properties'])})")


class _SentArguments(ArgModelBase):
    """A tool's arguments as the client sent them, for the tool to check (:func:`checked_arguments`): the SDK's
    own argument model would parse a JSON string into a list, coerce ``"3"`` into 3 and drop unknown names."""

    model_config = ConfigDict(extra="allow")

    def model_dump_one_level(self) -> Dict[str, Any]:
        return {"arguments": dict(self.model_extra or {})}


def _tool(fn: Callable[..., Any], schema: Dict[str, Any], annotations: ToolAnnotations) -> Tool:
    """The SDK's tool of ``fn(arguments)``, publishing ``schema`` and handing ``fn`` the arguments as sent."""
    tool = Tool.from_function(fn, annotations=annotations)
    tool.parameters = schema
    tool.fn_metadata.arg_model = _SentArguments
    return tool


class _AnswersEveryRequest(MCPServer):
    """The SDK's server, over stdio through :func:`.mcp_transport.serve_stdio` (a JSON-RPC error for each broken
    line, where the SDK's transport drops it) and over HTTP behind :class:`.mcp_transport.EveryBodyAnswered`. The SDK has no public way to hand its server other streams, hence
    its ``_lowlevel_server``, as its own ``run_stdio_async`` uses it."""

    async def run_stdio_async(self) -> None:
        server = self._lowlevel_server
        await serve_stdio(lambda read, write: server.run(read, write, server.create_initialization_options()))

    def streamable_http_app(self, **options: Any) -> Starlette:
        """The SDK's app, a broken body answered as over stdio (:class:`.mcp_transport.EveryBodyAnswered`)."""
        app = super().streamable_http_app(**options)
        app.add_middleware(EveryBodyAnswered)
        return app


def build_server(engine: Engine, *, name: str = "medretrieve", default_k: Optional[int] = None) -> MCPServer:
    """The MCP server with the ``search`` and ``answer`` tools over ``engine`` (module docstring). ``default_k``:
    the hits (evidence passages) of a call that names no ``k`` (None: the declaration's, 10)."""
    read_only = ToolAnnotations(read_only_hint=True, open_world_hint=False)
    search_schema, answer_schema = search_input_schema(default_k), answer_input_schema(default_k)

    async def search(arguments: Dict[str, Any]) -> Annotated[CallToolResult, SearchOutput]:
        """Search the medical collection: the best passages for the question, each with its source."""
        body = checked_arguments(arguments, SearchRequest, search_schema)
        options = body.search_kwargs()
        if default_k is not None:
            options.setdefault("k", default_k)
        out = search_output(await engine.search_async(body.question, options, body.deadline_ms))
        return CallToolResult(content=[TextContent(type="text", text=search_summary(out))],
                              structured_content=out.model_dump(mode="json"))

    async def answer(arguments: Dict[str, Any]) -> Annotated[CallToolResult, AnswerOutput]:
        """Answer the question from the collection, citing the sources as [n] and checking each citation; the
        sources listed are the cited ones and any scoring at least the relevance floor (all_sources: every one)."""
        sent = dict(arguments)
        all_sources = sent.pop("all_sources", False)  # the tool's own argument, not the HTTP body's
        if not isinstance(all_sources, bool):
            raise ToolError(f"all_sources must be true or false, not {all_sources!r}")
        body = checked_arguments(sent, AnswerRequest, answer_schema)
        k = body.k if "k" in body.model_fields_set or default_k is None else default_k
        out = answer_output(await engine.answer_async(body.question, k, body.filter_kwargs()), all_sources)
        return CallToolResult(content=[TextContent(type="text", text=answer_summary(out))],
                              structured_content=out.model_dump(mode="json"))

    server: MCPServer = _AnswersEveryRequest(
        name, version=__version__, log_level="WARNING",
        instructions="Medical literature retrieval. `search` returns evidence passages with their sources; "
                     "`answer` writes an answer that cites them as [n] (the source numbered n) and checks each citation.",
        tools=[_tool(search, search_schema, read_only), _tool(answer, answer_schema, read_only)])
    return server
