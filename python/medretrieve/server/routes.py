"""The endpoints of the API (see :mod:`medretrieve.server.app` for the list and the deadline rules)."""
from __future__ import annotations

import os
from pathlib import PurePath
from typing import Any, Callable, Dict, List, Optional, Type

from fastapi import APIRouter, FastAPI, Request
from starlette.background import BackgroundTask
from starlette.responses import PlainTextResponse, Response

from pydantic import BaseModel

from .._version import __version__
from ..records import Answer, SearchResult
from ..outbound import Deadline
from ..wire import (DEADLINE_HEADER, MAX_DEADLINE_MS, AnswerRequest, BatchSearchRequest, BatchSearchResponse,
                    ErrorResponse, FacetsRequest, FacetsResponse, SearchRequest)
from .admission import remaining_or_none
from .answers import answer_once, note_answer, stream_answer
from .engine import Engine, NotReady, ReloadRunning, Snapshot, describe
from .errors import ApiError
from .http import RawRoute, json_bytes, json_response, read_body, request_deadline
from .metrics import ServerMetrics

_ERRORS: Dict[Any, Dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": what} for code, what in (
        (400, "the body is not valid JSON (invalid_json)"), (408, "the body did not arrive in time"),
        (413, "the body is over the server's --max-body-bytes"),
        (422, "invalid request (the field at fault is named)"), (429, "overloaded: retry after Retry-After s"),
        (503, "the collection is not loaded yet"), (504, "the deadline passed before the work started"))}


def _body(model: Type[BaseModel]) -> Dict[str, Any]:
    """The OpenAPI request body of a route that parses its body itself (:func:`.http.read_body`; the model's
    schema is registered by :func:`add_routes`) and its ``X-Deadline-Ms`` header."""
    deadline = {"type": "number", "exclusiveMinimum": 0, "maximum": MAX_DEADLINE_MS}
    return {"requestBody": {"required": True, "content": {"application/json": {
                "schema": {"$ref": f"#/components/schemas/{model.__name__}"}}}},
            "parameters": [{"name": DEADLINE_HEADER, "in": "header", "required": False, "schema": deadline,
                            "description": "the deadline (ms) as the body's deadline_ms; the smaller counts"}]}


def _name(path: Any) -> Any:
    """The last part of a path (a model folder's or ranker file's name; ``default`` stays ``default``)."""
    return PurePath(path).name if isinstance(path, str) and path else path


def names_only(info: Dict[str, Any]) -> Dict[str, Any]:
    """``/v1/collection`` as it is published: :func:`.engine.describe` with each host path replaced by its last
    part (the collection's ``directory`` becomes its ``name``; encoders, ranker and cross-encoder by name), so a
    caller learns nothing of the server's file system."""
    out = dict(info)
    if "directory" in out:
        out["name"] = _name(out.pop("directory"))
    model = dict(out.get("model") or {})
    for key, entry in model.items():
        model[key] = {**entry, "source": _name(entry.get("source"))} if isinstance(entry, dict) else _name(entry)
    out["model"] = model
    return out


def _respond(payload: Any, waited_ms: float, work_ms: float, deadline: Deadline,
             after: Optional[BackgroundTask] = None) -> Response:
    """The JSON response, with ``Server-Timing`` (ms): the wait for a slot, the work, and the whole time from the
    request's arrival to its serialised response (so ``total - queue - work`` is the server's own overhead).
    ``after``: work to do once the response is sent (the client does not wait for it)."""
    body = json_bytes(payload)
    timing = f"queue;dur={waited_ms:.2f}, work;dur={work_ms:.2f}, total;dur={deadline.elapsed_ms():.2f}"
    return Response(body, media_type="application/json", headers={"Server-Timing": timing}, background=after)


async def _note_search(metrics: ServerMetrics, endpoint: str, results: List[SearchResult], missed: bool,
                       waited_ms: float) -> None:
    """Record a search's metrics (``missed``: the answer came after the deadline). A coroutine, so that Starlette
    runs it on the event loop after the response, not in a thread of its own."""
    metrics.child(metrics.queue_wait, endpoint).observe(waited_ms / 1000.0)
    for res in results:
        metrics.observe_stages(res.stages)
        if res.weak:
            metrics.weak.inc()
    if missed:
        metrics.child(metrics.deadline_misses, endpoint, "work").inc()


def _later(metrics: ServerMetrics, endpoint: str, results: List[SearchResult], deadline: Deadline,
           waited_ms: float) -> BackgroundTask:
    """:func:`_note_search` once the response is sent (~15 histogram updates a search the client need not wait
    for); whether the deadline was missed is judged now, as the response leaves."""
    return BackgroundTask(_note_search, metrics, endpoint, results, deadline.expired(), waited_ms)


def add_routes(app: FastAPI, engine: Engine, metrics: ServerMetrics) -> None:
    """Every endpoint of the API on ``app``, and the request bodies' schemas in its OpenAPI document. The search
    and answer endpoints read their own bodies (:class:`.http.RawRoute`)."""
    raw = APIRouter(route_class=RawRoute)
    _search_routes(raw, engine, metrics)
    _answer_route(raw, engine, metrics)
    app.include_router(raw)
    _operations_routes(app, engine, metrics)
    _document_bodies(app, engine, (SearchRequest, BatchSearchRequest, AnswerRequest))


def _document_bodies(app: FastAPI, engine: Engine, models: Any) -> None:
    """Add ``models``' JSON schemas (and those they use) to the app's OpenAPI components, where :func:`_body`
    points. A server without an LLM documents the one answer ``mode`` it takes (``cite``)."""
    make: Callable[[], Dict[str, Any]] = app.openapi

    def openapi() -> Dict[str, Any]:
        if app.openapi_schema is None:
            spec = make()
            components = spec.setdefault("components", {}).setdefault("schemas", {})
            for model in models:
                schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
                components.update(schema.pop("$defs", {}))
                components[model.__name__] = schema
            if engine.backend is None:
                components[AnswerRequest.__name__]["properties"]["mode"]["enum"] = ["cite"]
        return app.openapi_schema or make()

    # FastAPI's documented way to extend the schema: replace the app's openapi()
    app.openapi = openapi  # type: ignore[method-assign]


def _search_routes(app: APIRouter, engine: Engine, metrics: ServerMetrics) -> None:
    config = engine.config

    @app.post("/v1/search", response_model=SearchResult, responses=_ERRORS, tags=["search"],
              openapi_extra=_body(SearchRequest))
    async def search(request: Request) -> Response:
        """The best ``k`` passages for a question, found within the deadline, best first: each with its document,
        section, text and score (one scale per list; ``placed_by`` marks a hit put in place by a second search).
        ``weak`` says when the best evidence matches the question poorly, and why. Add ``"explain": true`` for
        the reason behind each stage and each hit's score at every stage."""
        body = await read_body(request, SearchRequest)
        deadline = request_deadline(request, body.deadline_ms, config.deadline_ms)
        kwargs = body.search_kwargs()

        def work(snap: Snapshot) -> SearchResult:
            return snap.retriever.search(body.question, deadline_ms=remaining_or_none(deadline), **kwargs)

        result, waited_ms = await engine.run("search", deadline, work)
        return _respond(result.to_dict(body.explain), waited_ms, result.timings_ms["total"], deadline,
                        _later(metrics, "/v1/search", [result], deadline, waited_ms))

    @app.post("/v1/search:batch", response_model=BatchSearchResponse, responses=_ERRORS, tags=["search"],
              openapi_extra=_body(BatchSearchRequest))
    async def search_batch(request: Request) -> Response:
        """Several questions with the same options; one deadline covers the queue and every search (they run
        one after another in one slot; each gets what is left)."""
        body = await read_body(request, BatchSearchRequest)
        if len(body.questions) > config.max_batch:
            raise ApiError(422, "invalid_request", f"questions: at most {config.max_batch} per batch on this "
                           f"server, got {len(body.questions)}", "questions")
        deadline = request_deadline(request, body.deadline_ms, config.deadline_ms)
        kwargs = body.search_kwargs()

        def work(snap: Snapshot) -> List[SearchResult]:
            return [snap.retriever.search(q, deadline_ms=remaining_or_none(deadline), **kwargs)
                    for q in body.questions]

        results, waited_ms = await engine.run("search", deadline, work)
        work_ms = sum(r.timings_ms["total"] for r in results)
        return _respond({"results": [r.to_dict(body.explain) for r in results]}, waited_ms, work_ms, deadline,
                        _later(metrics, "/v1/search:batch", results, deadline, waited_ms))

    @app.post("/v1/facets", response_model=FacetsResponse, responses=_ERRORS, tags=["search"],
              openapi_extra=_body(FacetsRequest))
    async def facets(request: Request) -> Response:
        """Counts per value of metadata fields ("by year", "by publication type") over the collection's documents
        that pass ``where`` (retracted articles left out unless ``include_retracted``), most frequent first; an
        unknown field or filter is refused 422 naming it."""
        body = await read_body(request, FacetsRequest)
        deadline = request_deadline(request, None, config.deadline_ms)

        def work(snap: Snapshot) -> Dict[str, Any]:
            return snap.retriever.facets(body.fields, where=body.where, include_retracted=body.include_retracted,
                                         top=body.top)

        counted, waited_ms = await engine.run("search", deadline, work)
        out = {"documents": counted["documents"], "facets": {
            name: [{"value": v, "count": n} for v, n in pairs] for name, pairs in counted["facets"].items()}}
        return json_response(out)


def _answer_route(app: APIRouter, engine: Engine, metrics: ServerMetrics) -> None:
    config = engine.config

    @app.post("/v1/answer", response_model=Answer, responses={
        **_ERRORS,
        200: {"content": {"text/event-stream": {}}, "description": "the answer; with stream=true as events "
              "`evidence` (the hits), `delta` (answer text as it is written), `answer` (the whole answer)"}},
        tags=["answer"], openapi_extra=_body(AnswerRequest))
    async def answer(request: Request) -> Response:
        """A grounded answer with checked citations, or an abstention with its reason (an LLM failure is reported
        in ``error``); ``shown_sources`` are the sources worth showing: the cited ones and any scoring at least the
        relevance floor. Without an LLM (no ``--llm``) the answer is extractive: the
        evidence's own sentences that answer the question, cited (``mode`` must then be ``cite``). The evidence is
        searched with the request's ``where``, ``include_retracted``, ``evidence_prior`` and ``recency_half_life``,
        as ``POST /v1/search`` searches; one the collection refuses is 422 naming it, streamed or not."""
        body = await read_body(request, AnswerRequest)
        if engine.backend is None and body.mode != "cite":
            raise ApiError(422, "invalid_request", f"mode: this server has no LLM and answers extractively, which "
                           f"is always 'cite', not {body.mode!r}", "mode")
        engine.ready()
        deadline = request_deadline(request, body.deadline_ms, config.answer_deadline_ms)
        if body.stream:
            return await stream_answer(engine, metrics, body, deadline)

        def work(snap: Snapshot) -> Answer:
            return answer_once(snap, engine.backend, body, deadline, config.deadline_ms)

        ans, waited_ms = await engine.run("answer", deadline, work)
        note_answer(metrics, ans)
        return _respond(ans.to_dict(body.explain), waited_ms, ans.timings.get("total", 0.0), deadline)


def _operations_routes(app: FastAPI, engine: Engine, metrics: ServerMetrics) -> None:
    config = engine.config

    @app.get("/healthz", tags=["operations"])
    async def healthz() -> Dict[str, Any]:
        """The process is alive (it may still be loading its collection)."""
        return {"status": "ok", "pid": os.getpid(), "version": __version__}

    @app.get("/readyz", tags=["operations"], responses={503: {"description": "loading, or the load failed"}})
    async def readyz() -> Response:
        """The collection is loaded and its retriever warmed: the server answers searches."""
        try:
            snap = engine.ready()
        except NotReady as exc:
            status = "failed" if engine.error else "loading"
            return json_response({"status": status, "reason": str(exc)}, status=503, headers={"Retry-After": "1"})
        return json_response({"status": "ready", "generation": snap.generation, "chunks": len(snap.collection)})

    @app.get("/v1/collection", tags=["operations"])
    async def collection() -> Dict[str, Any]:
        """Size, models, index and build info of the served collection (its name and its models' names, not
        where they are on the server)."""
        return names_only(describe(engine.ready(), config, engine.backend is not None))

    @app.get("/metrics", tags=["operations"], response_class=PlainTextResponse)
    async def prometheus() -> Response:
        """Prometheus metrics (text format)."""
        payload, content_type = metrics.exposition()
        return Response(payload, media_type=content_type)

    @app.post("/v1/admin/reload", tags=["operations"],
              responses={403: {"model": ErrorResponse}, 409: {"model": ErrorResponse}})
    async def reload() -> Dict[str, Any]:
        """Load the collection directory again (e.g. after ``medretrieve build --overwrite``) and swap it in
        atomically: requests keep being answered, by the old collection until the new one is ready. Off unless
        the server was started with ``--enable-reload``; every worker reloads."""
        if not config.enable_reload:
            raise ApiError(403, "reload_disabled", "reload is off: start the server with --enable-reload")
        try:
            snap = await engine.reload()
        except ReloadRunning as exc:
            raise ApiError(409, "reload_running", str(exc)) from None
        except Exception as exc:  # the new collection did not load: the old one stays
            raise ApiError(500, "reload_failed", f"{type(exc).__name__}: {exc}; still serving the previous "
                           "collection") from None
        return {"generation": snap.generation, "chunks": len(snap.collection),
                "documents": snap.collection.n_documents, "load_ms": round(snap.load_ms, 1)}
