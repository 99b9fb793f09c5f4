"""``POST /v1/answer``: one grounded answer, whole or as server-sent events.

Streaming (``"stream": true``) sends, in order: ``evidence`` (the retrieved hits, as soon as retrieval is done),
``delta`` events (the answer text as the LLM writes it, when the backend can stream, else once), then ``answer``
(``Answer.to_dict()``, citations checked). A failure after the stream began comes as an ``error`` event. The
slot is taken before the response starts, so overload and queue deadlines still answer 429 / 504.
"""
from __future__ import annotations

import asyncio
from typing import Any, AsyncIterator, Callable, Optional, Sequence

from starlette.responses import StreamingResponse

from ..generation.generate import Answer, Answerer
from ..retrieval.budget import Deadline
from ..retrieval.results import SearchResult
from .admission import remaining_or_none
from .engine import Engine, Snapshot
from .http import json_bytes
from .metrics import ServerMetrics
from .schemas import AnswerRequest

Emit = Callable[[str, Any], None]


class _Announcing:
    """A retriever that tells ``emit`` its hits before the Answerer goes on to the LLM."""

    def __init__(self, retriever: Any, emit: Emit) -> None:
        self.retriever = retriever
        self.emit = emit

    def search(self, question: str, **kwargs: Any) -> SearchResult:
        res = self.retriever.search(question, **kwargs)
        d = res.to_dict()
        self.emit("evidence", {key: d[key] for key in ("hits", "query_type", "weak", "weak_reasons")})
        return res


class _Streaming:
    """An LLM backend whose ``generate`` streams (when the backend can) and hands each piece to ``emit``."""

    def __init__(self, backend: Any, emit: Emit) -> None:
        self.backend = backend
        self.emit = emit

    def generate(self, messages: Sequence[dict], **kwargs: Any) -> str:
        if not hasattr(self.backend, "stream"):
            text = self.backend.generate(messages, **kwargs)
            self.emit("delta", {"text": text})
            return text
        pieces = []
        for piece in self.backend.stream(messages, **kwargs):
            pieces.append(piece)
            self.emit("delta", {"text": piece})
        return "".join(pieces)


def answer_once(snap: Snapshot, backend: Any, body: AnswerRequest, deadline: Deadline, retrieve_deadline_ms: float,
                emit: Optional[Emit] = None) -> Answer:
    """Retrieve, abstain or ask the LLM, check the citations (blocking; runs in the answer pool)."""
    retriever: Any = snap.retriever if emit is None else _Announcing(snap.retriever, emit)
    llm = backend if emit is None else _Streaming(backend, emit)
    answerer = Answerer(retriever, llm, mode=body.mode, k=body.k, max_tokens=body.max_tokens,
                        retrieve_deadline_ms=retrieve_deadline_ms)
    return answerer.answer(body.question, qtype=body.qtype, deadline_ms=remaining_or_none(deadline))


def note_answer(metrics: ServerMetrics, ans: Answer) -> None:
    if ans.abstained:
        metrics.abstained.inc()


def _event(kind: str, data: Any) -> bytes:
    return b"event: " + kind.encode("utf-8") + b"\ndata: " + json_bytes(data) + b"\n\n"


async def stream_answer(engine: Engine, metrics: ServerMetrics, body: AnswerRequest,
                        deadline: Deadline) -> StreamingResponse:
    """Take an answer slot (429 / 504 / 503 raise from here, before any byte is sent), start the work, and
    stream its events. The slot is given back when the work ends, also when the client left early."""
    slot = engine.slot("answer", deadline)
    await slot.__aenter__()
    loop = asyncio.get_running_loop()
    events: "asyncio.Queue[Optional[bytes]]" = asyncio.Queue()

    def emit(kind: str, data: Any) -> None:  # called from the answer thread
        loop.call_soon_threadsafe(events.put_nowait, _event(kind, data))

    def work() -> None:
        try:
            ans = answer_once(engine.ready(), engine.backend, body, deadline, engine.config.deadline_ms, emit)
            note_answer(metrics, ans)
            emit("answer", ans.to_dict())
        except Exception as exc:  # the status line is gone: report it as an event
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

    async def body_events() -> AsyncIterator[bytes]:
        while True:
            item = await events.get()
            if item is None:
                return
            yield item

    return StreamingResponse(body_events(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
