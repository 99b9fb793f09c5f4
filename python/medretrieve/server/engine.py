"""The work behind the HTTP API: the loaded collection (a :class:`Snapshot`), admission, the thread pools.

Searches are CPU-bound and the ``Retriever`` is thread-safe, so they run in a pool of ``max_inflight`` threads,
never on the event loop; answers wait on the LLM and get their own pool and slots. A reload builds a new snapshot
beside the serving one and swaps a single reference: requests already working finish on the snapshot they
started with, later ones get the new one, none fails.
"""
from __future__ import annotations

import asyncio
import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, AsyncIterator, Callable, Dict, Optional, Tuple, TypeVar

from .._files import write_text_atomic
from .._version import __version__
from ..corpus.collection import DENSE, Collection
from ..outbound import Deadline
from ..retrieval.collection_view import CollectionView
from ..retrieval.retriever import Retriever
from .admission import Admission
from .config import ServerConfig
from .metrics import ServerMetrics

log = logging.getLogger("medretrieve.server")
T = TypeVar("T")
STAMP_POLL_S = 1.0  # how often a worker looks for a reload another worker did (s)


class NotReady(Exception):
    """No collection is being served yet (loading, or the load failed)."""


class ReloadRunning(RuntimeError):
    """A reload was asked for while another one runs."""


@dataclass
class Snapshot:
    """One loaded collection and its retriever; ``generation`` counts loads (1 = the first)."""

    generation: int
    retriever: Retriever
    load_ms: float
    loaded_at: float = field(default_factory=time.time)

    @property
    def collection(self) -> CollectionView:
        """The collection the snapshot's retriever searches: a Collection directory the server loaded, or whatever
        a Retriever given to ``create_app`` searches (a sharded retriever's shards, for Ray Serve)."""
        return self.retriever.collection


def load_snapshot(config: ServerConfig, generation: int) -> Snapshot:
    """Open ``config.collection`` and build and warm its retriever (blocking, seconds)."""
    t0 = time.perf_counter()
    col = Collection.open(config.collection, query_encoder=config.query_encoder,
                          encoder_threads=config.encoder_threads)
    cross = None
    if config.cross_encoder:
        from ..models.encoders import CrossEncoder

        cross = CrossEncoder.from_dir(config.cross_encoder, threads=config.encoder_threads)
    ret = Retriever(col, cross_encoder=cross, ranker=config.ranker,
                    training=list(config.training) if config.training else None, warmup=False)
    ret.warmup(freeze_gc=True)  # the server owns its process: a frozen heap keeps full collections out of searches
    return Snapshot(generation, ret, (time.perf_counter() - t0) * 1000.0)


def describe(snap: Snapshot, config: ServerConfig, llm: bool) -> Dict[str, Any]:
    """``GET /v1/collection``: size, model, index and build info of the served collection (index and build info
    of a Collection directory only: a sharded retriever's shards each have their own)."""
    col = snap.collection
    manifest = col.manifest
    stored: Dict[str, Any] = {}
    if isinstance(col, Collection):
        stats = col.dense.stats()
        dense_file = col.directory / DENSE
        stored = {
            "directory": str(col.directory),
            "sections": len(col.sections),
            "dtype": stats.dtype,
            "index": {"M": stats.M, "ef_construction": stats.ef_construction, "count": stats.count,
                      "deleted": stats.deleted, "mmap": stats.read_only, "memory_bytes": stats.memory_bytes,
                      "file_bytes": dense_file.stat().st_size if dense_file.exists() else None},
            "build": {"format": manifest.get("format"), "created": manifest.get("created"),
                      "versions": manifest.get("versions"), "chunking": manifest.get("chunking")},
            "metadata": col.metadata_fields}  # the fields a filter or a facet may name, name -> type
    elif getattr(col, "metadata_fields", None) is not None:  # a sharded retriever's: the fields of all its shards
        stored["metadata"] = col.metadata_fields  # type: ignore[attr-defined]
    return {
        "documents": col.n_documents,
        "chunks": len(col),
        "dim": col.dim,
        **stored,
        "model": {"encoder": manifest.get("encoder"), "query_encoder": config.query_encoder or
                  manifest.get("query_encoder"), "cross_encoder": config.cross_encoder, "ranker": config.ranker},
        "server": {"version": __version__, "pid": os.getpid(), "generation": snap.generation,
                   "loaded_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(snap.loaded_at)),
                   "load_ms": round(snap.load_ms, 1), "answers": "llm" if llm else "extractive",
                   "max_inflight": config.max_inflight,
                   "max_queue": config.queue_size, "deadline_ms": config.deadline_ms,
                   "encoder_threads": config.encoder_threads},
    }


class Engine:
    """The serving state of one worker process (see the module docstring).

    ``snapshot``: a retriever already built (served at once; otherwise :meth:`start` loads ``config.collection``
    in the background). ``backend``: an LLM backend for answers (otherwise one is made from ``config.llm_url``).
    """

    def __init__(self, config: ServerConfig, metrics: ServerMetrics, snapshot: Optional[Snapshot] = None,
                 backend: Any = None) -> None:
        self.config = config
        self.metrics = metrics
        self.snapshot = snapshot
        self.error: Optional[str] = None
        self.backend = backend
        self._own_backend = False
        self.search_slots = Admission(config.max_inflight, config.queue_size)
        self.answer_slots = Admission(config.answer_concurrency, config.queue_size, work_ms_prior=2000.0)
        self._pools = {"search": ThreadPoolExecutor(config.max_inflight, thread_name_prefix="mr-search"),
                       "answer": ThreadPoolExecutor(config.answer_concurrency, thread_name_prefix="mr-answer")}
        self._reload_lock: Optional[asyncio.Lock] = None  # made on the event loop, in start()
        self._stamp_seen = self._stamp()
        self._tasks: list = []
        if snapshot is not None:
            self._publish(snapshot)

    # ------------------------------------------------------------- life cycle
    async def start_loaded(self) -> None:
        """:meth:`start`, then wait for the collection (``config.preload``): the load's error is raised, so a
        worker that cannot serve never starts accepting connections."""
        self.start(background_load=False)
        if self.snapshot is None:
            snap = await asyncio.get_running_loop().run_in_executor(None, load_snapshot, self.config, 1)
            self._publish(snap)
            log.info("medretrieve: serving %s (%d chunks, loaded in %.0f ms)", self.config.collection,
                     len(snap.collection), snap.load_ms)

    def start(self, background_load: bool = True) -> None:
        """Make the LLM backend, load the collection in the background (unless given, or ``background_load`` is
        off), watch the reload stamp. Runs on the event loop: at the app's startup, or at its first request when
        the app is mounted in another one that does not run its lifespan. Once only."""
        if self._reload_lock is not None:
            return
        self._reload_lock = asyncio.Lock()
        if self.backend is None and self.config.llm_url:
            from ..generation.llm import OpenAIBackend

            self.backend = OpenAIBackend(self.config.llm_url, self.config.llm_model or "",
                                         timeout_s=self.config.llm_timeout_s)
            self._own_backend = True
        if self.snapshot is None and background_load:
            self._tasks.append(asyncio.ensure_future(self._first_load()))
        if self.config.reload_stamp:
            self._tasks.append(asyncio.ensure_future(self._watch_stamp()))

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for pool in self._pools.values():
            pool.shutdown(wait=True)
        if self._own_backend:
            self.backend.close()

    async def _first_load(self) -> None:
        try:
            snap = await asyncio.get_running_loop().run_in_executor(None, load_snapshot, self.config, 1)
        except Exception as exc:  # a bad collection: keep answering /healthz and /readyz with the reason
            self.error = f"{type(exc).__name__}: {exc}"
            log.error("medretrieve: could not load %s: %s", self.config.collection, self.error)
            return
        self._publish(snap)
        log.info("medretrieve: serving %s (%d chunks, loaded in %.0f ms)", self.config.collection,
                 len(snap.collection), snap.load_ms)

    def _publish(self, snap: Snapshot) -> None:
        self.snapshot = snap
        self.error = None
        col = snap.collection
        dense_file = col.directory / DENSE if isinstance(col, Collection) else None
        self.metrics.set_index(len(col), col.n_documents,
                               dense_file.stat().st_size if dense_file and dense_file.exists() else 0)
        self.metrics.ready.set(1)

    def ready(self) -> Snapshot:
        """The served snapshot; NotReady while there is none (called on the event loop, it starts the engine if
        nothing did)."""
        if self._reload_lock is None:
            self.start()
        snap = self.snapshot
        if snap is None:
            raise NotReady(f"loading the collection failed: {self.error}" if self.error else
                           "the collection is still loading")
        return snap

    # ------------------------------------------------------------- work
    def pool(self, kind: str) -> ThreadPoolExecutor:
        """The thread pool of ``kind`` ("search" / "answer") work."""
        return self._pools[kind]

    @asynccontextmanager
    async def slot(self, kind: str, deadline: Deadline) -> AsyncIterator[float]:
        """Hold one of the ``kind`` slots ("search" / "answer") for the enclosed work; yields the ms waited for
        it. Raises NotReady, Overloaded or QueueTimeout (:mod:`.admission`) before yielding."""
        self.ready()
        slots = self.search_slots if kind == "search" else self.answer_slots
        queued = self.metrics.child(self.metrics.queued, kind)
        inflight = self.metrics.child(self.metrics.inflight, kind)
        queued.inc()
        entered = False
        try:
            async with slots.slot(deadline) as waited_ms:
                queued.dec()
                entered = True
                inflight.inc()
                try:
                    yield waited_ms
                finally:
                    inflight.dec()
        finally:
            if not entered:
                queued.dec()

    async def run(self, kind: str, deadline: Deadline, fn: Callable[[Snapshot], T]) -> Tuple[T, float]:
        """``fn(snapshot)`` in the ``kind`` pool once a slot is free; returns its result and the ms waited for the
        slot. The snapshot is taken when the slot is: a reload while the request waited serves it the new one."""
        async with self.slot(kind, deadline) as waited_ms:
            snap = self.ready()
            result = await asyncio.get_running_loop().run_in_executor(self._pools[kind], fn, snap)
        return result, waited_ms

    # ------------------------------------------------------------- reload
    async def reload(self, announce: bool = True) -> Snapshot:
        """Load the collection again and swap it in; with ``announce`` tell the other workers (reload stamp).
        Raises ReloadRunning when a reload is already running; the load's own error when it fails (the served
        collection stays)."""
        lock = self._reload_lock
        if lock is None:
            raise RuntimeError("the server has not started")
        if lock.locked():
            raise ReloadRunning("a reload is already running")
        async with lock:
            generation = (self.snapshot.generation if self.snapshot else 0) + 1
            try:
                snap = await asyncio.get_running_loop().run_in_executor(None, load_snapshot, self.config,
                                                                        generation)
            except Exception:
                self.metrics.reloads.labels("failed").inc()
                raise
            self._publish(snap)
            self.metrics.reloads.labels("ok").inc()
            if announce and self.config.reload_stamp:
                write_text_atomic(self.config.reload_stamp, f"{os.getpid()} {time.time()}\n")
                self._stamp_seen = self._stamp()
            return snap

    def _stamp(self) -> Optional[int]:
        path = self.config.reload_stamp
        try:
            return Path(path).stat().st_mtime_ns if path else None
        except FileNotFoundError:
            return None

    async def _watch_stamp(self) -> None:
        while True:
            await asyncio.sleep(STAMP_POLL_S)
            seen = self._stamp()
            if seen == self._stamp_seen or (self._reload_lock and self._reload_lock.locked()):
                continue
            self._stamp_seen = seen
            try:
                await self.reload(announce=False)
                log.info("medretrieve: reloaded %s after another worker did", self.config.collection)
            except Exception as exc:
                log.error("medretrieve: reload after another worker's failed: %s: %s", type(exc).__name__, exc)
