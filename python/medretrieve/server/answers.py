"""``POST /v1/answer``: one grounded answer, whole or as server-sent events.

The evidence is searched with the request's filter options (``where``, ``include_retracted``, ``evidence_prior``,
``recency_half_life``: :data:`medretrieve.wire.FILTER_OPTIONS`), as ``POST /v1/search`` searches. With an LLM
(``--llm``) the answer is generated; without one it is extractive (the evidence's own sentences that
answer the question, cited and checked, as ``medretrieve answer`` does without ``--llm``).

Streaming (``"stream": true``) sends, in order: ``evidence`` (the retrieved hits, as soon as retrieval is done),
``delta`` events (the answer text as the LLM writes it, when the backend can stream, else once; an extractive
answer once), then ``answer`` (``Answer.to_dict()``, citations checked). A failure after the stream began comes as
an ``error`` event. The slot is taken before the response starts, so overload and queue deadlines still answer
429 / 504, and the response starts with the evidence, so an option the retrieval refuses (a filter naming a field
the collection lacks) still answers 422, as without streaming. A client that goes away cancels its generation: the LLM request is closed at once (a backend that takes
a :class:`~medretrieve.generation.llm.Cancel`), or at its next piece, and the slot is free again as soon as
the generation stops.
"""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, List, Optional, Sequence

from starlette.responses import StreamingResponse

from ..generation.generate import Answerer
from ..generation.llm import Cancel, LLMCancelled, StreamingBackend
from ..records import Answer, SearchResult
from ..outbound import Deadline
from ..wire import AnswerRequest
from .admission import remaining_or_none
from .engine import Engine, Snapshot
from .http import json_bytes
from .metrics import ServerMetrics

Emit = Callable[[str, Any], None]


class _Announcing:
    """A retriever that tells ``emit`` its hits before the Answerer goes on to the LLM."""

    def __init__(self, retriever: Any, emit: Emit, explain: bool) -> None:
        self.retriever = retriever
        self.emit = emit
        self.explain = explain

    def search(self, question: str, **kwargs: Any) -> SearchResult:
        res = self.retriever.search(question, **kwargs)
        self.emit("evidence", {"hits": [h.to_dict(self.explain) for h in res.hits], "query_type": res.query_type,
                               "weak": res.weak, "weak_reasons": list(res.weak_reasons)})
        return res


class _Streaming:
    """An LLM backend whose ``generate`` streams (when the backend can) and hands each piece to ``emit``; it stops
    when ``cancel`` is set (the client left)."""

    def __init__(self, backend: Any, emit: Emit, cancel: Cancel) -> None:
        self.backend = backend
        self.emit = emit
        self.cancel = cancel

    def generate(self, messages: Sequence[dict], **kwargs: Any) -> str:
        if self.cancel.is_set():
            raise LLMCancelled("the client went away before generation")
        if not isinstance(self.backend, StreamingBackend):
            text = self.backend.generate(messages, **kwargs)
            self.emit("delta", {"text": text})
            return text
        pieces = []
        stream = self.backend.stream(messages, cancel=self.cancel, **kwargs)
        try:
            for piece in stream:
                pieces.append(piece)
                self.emit("delta", {"text": piece})
                if self.cancel.is_set():  # a backend that cannot be cancelled mid-read stops here
                    raise LLMCancelled("the client went away during generation")
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()  # a generator's finally closes its upstream request
        return "".join(pieces)


def answer_once(snap: Snapshot, backend: Any, body: AnswerRequest, deadline: Deadline, retrieve_deadline_ms: float,
                emit: Optional[Emit] = None, cancel: Optional[Cancel] = None) -> Answer:
    """Retrieve, abstain, or answer (the LLM's, else extractive), check the citations (blocking; runs in the answer
    pool). ``emit``: stream the evidence and the text as they come."""
    retriever: Any = snap.retriever if emit is None else _Announcing(snap.retriever, emit, body.explain)
    llm = backend if emit is None or backend is None else _Streaming(backend, emit, cancel or Cancel())
    answerer = Answerer(retriever, llm, mode=body.mode, k=body.k, max_tokens=body.max_tokens,
                        retrieve_deadline_ms=retrieve_deadline_ms)
    ans = answerer.answer(body.question, qtype=body.qtype, deadline_ms=remaining_or_none(deadline),
                          **body.filter_kwargs())
    if emit is not None and backend is None and not ans.abstained:
        emit("delta", {"text": ans.text})  # the extractive text, once
    return ans


def note_answer(metrics: ServerMetrics, ans: Answer) -> None:
    if ans.abstained:
        metrics.abstained.inc()


def _event(kind: str, data: Any) -> bytes:
    return b"event: " + kind.encode("utf-8") + b"\ndata: " + json_bytes(data) + b"\n\n"


async def stream_answer(engine: Engine, metrics: ServerMetrics, body: AnswerRequest,
                        deadline: Deadline) -> StreamingResponse:
    """Take an answer slot (429 / 504 / 503 raise from here, before any byte is sent), start the work, and
    stream its events. The slot is given back when the work ends; a client that leaves early cancels the work."""
    slot = engine.slot("answer", deadline)
    await slot.__aenter__()
    loop = asyncio.get_running_loop()
    events: "asyncio.Queue[Optional[bytes]]" = asyncio.Queue()
    cancel = Cancel()
    refused: List[Exception] = []  # a request the retrieval refused before any event (a filter's unknown field)

    def emit(kind: str, data: Any) -> None:  # called from the answer thread
        loop.call_soon_threadsafe(events.put_nowait, _event(kind, data))

    def work() -> None:
        announced = False

        def announce(kind: str, data: Any) -> None:
            nonlocal announced
            announced = True
            emit(kind, data)

        try:
            ans = answer_once(engine.ready(), engine.backend, body, deadline, engine.config.deadline_ms, announce,
                              cancel)
            note_answer(metrics, ans)
            emit("answer", ans.to_dict(body.explain))
        except Exception as exc:
            if not announced and isinstance(exc, (ValueError, TypeError)):
                refused.append(exc)  # no event yet: the status line still can say it (422, as without stream)
            else:  # the status line is gone: report it as an event
                kind = "invalid_request" if isinstance(exc, (ValueError, TypeError)) else "internal_error"
                emit("error", {"error": {"type": kind, "message": f"{type(exc).__name__}: {exc}"[:500]}})
        finally:
            loop.call_soon_threadsafe(events.put_nowait, None)

    try:
        done = loop.run_in_executor(engine.pool("answer"), work)
    except BaseException:  # the pool is shut down (the server stops): give the slot back
        await slot.__aexit__(None, None, None)
        raise
    done.add_done_callback(lambda _: asyncio.ensure_future(slot.__aexit__(None, None, None)))
    try:  # the status line waits for the first event: the evidence (retrieval's deadline bounds it) or the end
        first = await events.get()
    except BaseException:  # the client went away before it: stop the work
        cancel.set()
        raise
    if first is None and refused:
        raise refused[0]  # the handlers of ValueError / TypeError answer it: 422 naming the option

    async def body_events() -> AsyncIterator[bytes]:
        finished = False
        item = first
        try:
            while item is not None:
                yield item
                item = await events.get()
            finished = True
        finally:
            if not finished:  # the client went away (Starlette cancelled the response): stop the generation
                cancel.set()

    return StreamingResponse(body_events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
