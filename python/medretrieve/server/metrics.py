"""Prometheus metrics of one server (``GET /metrics``), with prometheus-client.

Names (all prefixed ``medretrieve_``; times in seconds, Prometheus' base unit):

- ``requests_total{endpoint,status}``, ``request_duration_seconds{endpoint}`` (arrival to response, queueing
  included), ``queue_wait_seconds{endpoint}``, ``stage_duration_seconds{stage}`` (each search stage that ran);
- ``deadline_misses_total{endpoint,phase}``: ``phase="queue"`` the deadline passed while queued (answered 504),
  ``phase="work"`` the answer came after the deadline;
- ``weak_total`` (weak questions), ``abstained_total`` (answers that abstained);
- ``inflight{kind}``, ``queued{kind}`` (``kind`` search or answer), ``shed_total{endpoint,reason}`` (answered
  429; ``reason`` queue_full or deadline);
- ``index_chunks``, ``index_documents``, ``index_bytes`` (the loaded collection), ``reloads_total{outcome}``;
- ``ready``: 1 per worker serving a collection (summed over the workers: how many are ready).

Several workers: when ``PROMETHEUS_MULTIPROC_DIR`` is set (``medretrieve serve --workers N`` sets it), every
worker writes its values there and ``/metrics`` sums them over the live workers (prometheus-client's multiprocess
mode), so any worker answers for all.
"""
from __future__ import annotations

import os
from typing import Any, Dict, Iterable, Tuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE  # noqa: F401 (re-exported for the app)

from ..retrieval.results import StageInfo

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# request latencies (s): fine steps around the 300 ms budget, coarse beyond it
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.02, 0.03, 0.05, 0.075, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4, 0.5,
                    0.75, 1.0, 2.5, 5.0, 10.0, 30.0)
_STAGE_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0)


def multiprocess() -> bool:
    return bool(os.environ.get(MULTIPROC_ENV))


class ServerMetrics:
    """The metrics of one app, in their own registry (several apps in one process do not collide)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        reg = self.registry
        self.requests = Counter("medretrieve_requests", "HTTP requests answered", ["endpoint", "status"],
                                registry=reg)
        self.latency = Histogram("medretrieve_request_duration_seconds", "Arrival to response, queueing included",
                                 ["endpoint"], buckets=_LATENCY_BUCKETS, registry=reg)
        self.queue_wait = Histogram("medretrieve_queue_wait_seconds", "Time waited for a work slot",
                                    ["endpoint"], buckets=_LATENCY_BUCKETS, registry=reg)
        self.stage = Histogram("medretrieve_stage_duration_seconds", "Time of each search stage that ran",
                               ["stage"], buckets=_STAGE_BUCKETS, registry=reg)
        self.deadline_misses = Counter("medretrieve_deadline_misses", "Requests that missed their deadline",
                                       ["endpoint", "phase"], registry=reg)
        self.weak = Counter("medretrieve_weak", "Searches whose question was weak", registry=reg)
        self.abstained = Counter("medretrieve_abstained", "Answers that abstained", registry=reg)
        self.inflight = Gauge("medretrieve_inflight", "Requests working now", ["kind"], registry=reg,
                              multiprocess_mode="livesum")
        self.queued = Gauge("medretrieve_queued", "Requests waiting for a slot", ["kind"], registry=reg,
                            multiprocess_mode="livesum")
        self.shed = Counter("medretrieve_shed", "Requests refused with 429", ["endpoint", "reason"], registry=reg)
        self.index_chunks = Gauge("medretrieve_index_chunks", "Live chunks of the loaded collection", registry=reg,
                                  multiprocess_mode="livemax")
        self.index_documents = Gauge("medretrieve_index_documents", "Live documents of the loaded collection",
                                     registry=reg, multiprocess_mode="livemax")
        self.index_bytes = Gauge("medretrieve_index_bytes", "Bytes of the dense index file", registry=reg,
                                 multiprocess_mode="livemax")
        self.reloads = Counter("medretrieve_reloads", "Collection reloads", ["outcome"], registry=reg)
        self.ready = Gauge("medretrieve_ready", "Workers serving a collection", registry=reg,
                           multiprocess_mode="livesum")
        self._children: Dict[Tuple[int, Tuple[str, ...]], Any] = {}

    def observe_stages(self, stages: Iterable[StageInfo]) -> None:
        for s in stages:
            if s.ran:
                self.child(self.stage, s.name).observe(s.elapsed_ms / 1000.0)

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, looked up once (prometheus-client's ``labels`` costs ~5 us a call, and a
        search records about 15)."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def set_index(self, chunks: int, documents: int, nbytes: int) -> None:
        self.index_chunks.set(chunks)
        self.index_documents.set(documents)
        self.index_bytes.set(nbytes)

    def exposition(self) -> Tuple[bytes, str]:
        """The text format of every metric (summed over the live workers in multiprocess mode)."""
        if multiprocess():
            from prometheus_client.multiprocess import MultiProcessCollector

            registry = CollectorRegistry()
            MultiProcessCollector(registry)
            return generate_latest(registry), CONTENT_TYPE
        return generate_latest(self.registry), CONTENT_TYPE

    @staticmethod
    def process_exit() -> None:
        """Drop this process's live gauges from the shared directory (multiprocess mode)."""
        if multiprocess():
            from prometheus_client.multiprocess import mark_process_dead

            mark_process_dead(os.getpid())
