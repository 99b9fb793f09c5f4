"""The ASGI app: :func:`create_app` for users who mount medretrieve in their own service, :func:`app_from_env` for
``medretrieve serve``'s uvicorn workers.

Endpoints: ``POST /v1/search``, ``POST /v1/search:batch``, ``POST /v1/answer`` (when an LLM is configured;
``"stream": true`` answers as server-sent events), ``GET /healthz`` (the process is alive), ``GET /readyz``
(the collection is loaded and warmed), ``GET /v1/collection``, ``GET /metrics`` (Prometheus),
``POST /v1/admin/reload`` (off unless enabled), ``GET /openapi.json``; and pages (:mod:`.pages`, offline):
``GET /`` (the search page) and ``GET /docs`` (the API's documentation).

Deadlines: a request's ``deadline_ms`` (or the ``X-Deadline-Ms`` header; the smaller counts; the server's default
when neither is given) runs from the moment the request arrived and covers the wait for a slot and the work; a
request still waiting when it passes is answered 504 without doing the work (:mod:`.admission`). The response
header ``Server-Timing`` gives the queue wait, the work time and the total from arrival to the response (ms).
"""
from __future__ import annotations

import os
from contextlib import asynccontextmanager
from typing import Any, AsyncIterator, Dict, Union

from fastapi import FastAPI

from .._files import write_text_atomic
from .._version import __version__
from ..retrieval.retriever import Retriever
from . import errors
from .config import ServerConfig
from .engine import Engine, Snapshot
from .http import Observe, endpoint_of
from .metrics import ServerMetrics
from .pages import add_search_page, new_app
from .routes import add_routes

def _resolve(source: Union[ServerConfig, str, "os.PathLike[str]", Retriever], settings: Dict[str, Any]):
    if isinstance(source, ServerConfig):
        if settings:
            raise TypeError("pass settings inside the ServerConfig, not beside it")
        return source, None
    if isinstance(source, Retriever):
        config = ServerConfig(str(source.collection.directory), **settings)
        if config.enable_reload:
            raise ValueError("enable_reload needs a collection directory, not a Retriever built elsewhere")
        return config, Snapshot(1, source, 0.0)
    return ServerConfig(os.fspath(source), **settings), None


def create_app(source: Union[ServerConfig, str, "os.PathLike[str]", Retriever], *, backend: Any = None,
               **settings: Any) -> FastAPI:
    """The medretrieve HTTP API as a FastAPI app (mount it, or run it with any ASGI server).

    ``source``: a collection directory (``settings`` are :class:`~.config.ServerConfig` fields, e.g.
    ``max_inflight=4, deadline_ms=200``), a whole ``ServerConfig``, or a ``Retriever`` already built (served as
    it is). The collection loads in the background when the app starts (``/readyz`` says when it is ready), or
    before it starts with ``preload=True``.
    ``backend``: an LLM backend (``generate(messages, ...) -> str``) for ``/v1/answer``, instead of
    ``llm_url`` / ``llm_model``.
    """
    config, snapshot = _resolve(source, settings)
    metrics = ServerMetrics()
    engine = Engine(config, metrics, snapshot, backend)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if config.preload:
            try:
                await engine.start_loaded()
            except Exception as exc:
                if config.startup_failure_file:
                    write_text_atomic(config.startup_failure_file, f"{type(exc).__name__}: {exc}")
                raise
        else:
            engine.start()
        try:
            yield
        finally:
            await engine.stop()
            metrics.process_exit()

    app = new_app(title="medretrieve", version=__version__, lifespan=lifespan,
                  description="Hybrid retrieval for grounded medical RAG, under a deadline.")
    app.state.engine = engine
    app.add_middleware(Observe, metrics=metrics)
    errors.install(app, metrics, endpoint_of)
    add_routes(app, engine, metrics)
    add_search_page(app)
    return app


def app_from_env() -> FastAPI:
    """The app of one ``medretrieve serve`` worker (uvicorn factory): its config comes from the environment."""
    # a worker draws no progress bars; without this, tqdm (imported by bm25s) makes a multiprocessing lock that a
    # spawned worker never releases, and multiprocessing warns about "leaked semaphore objects" at every shutdown
    from tqdm.std import TqdmDefaultWriteLock

    TqdmDefaultWriteLock.mp_lock = None
    return create_app(ServerConfig.from_env())
