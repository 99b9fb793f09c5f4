"""What a server serves and how much work it takes on: :class:`ServerConfig`, checked once.

The config travels to uvicorn's worker processes as JSON in the environment variable :data:`CONFIG_ENV`
(workers are spawned, so they import :func:`medretrieve.server.app.app_from_env` and read it back).
"""
from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

from .keys import KeyDigests, check_digests  # the standard library only: a config checks its keys without a server

from ..wire import DEFAULT_DEADLINE_MS

CONFIG_ENV = "MEDRETRIEVE_SERVE_CONFIG"
DEFAULT_MAX_BODY_BYTES = 1 << 20  # 1 MiB: a batch of 64 questions of 4,000 characters is ~260 kB


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


@dataclass(frozen=True)
class ServerConfig:
    """Settings of one server process (each uvicorn worker holds its own copy).

    - ``collection``: the collection directory (``medretrieve build``; opened memory-mapped, so workers share one
      copy of its pages).
    - ``ranker`` (``"default"``: the shipped learned ranker; None: none; or a ranker JSON), ``cross_encoder`` /
      ``query_encoder`` (model directories), ``training`` (BioASQ golden files for training-memory expansion): as
      for ``medretrieve search``.
    - ``llm_url`` + ``llm_model``: an OpenAI-compatible server for ``/v1/answer`` (None: extractive answers);
      ``llm_timeout_s``: per LLM request (s); ``answer_concurrency``: answers generated at once (they wait on the
      LLM, so they get their own slots and do not hold search slots).
    - ``encoder_threads``: ONNX Runtime threads per encoder call (default 1: searches run side by side in
      ``max_inflight`` threads, so each encoder call keeps to one core instead of spreading over, and spinning on,
      all of them).
    - ``answer_deadline_ms``: the deadline of an answer request that names none (ms; retrieval within it keeps
      ``deadline_ms``).
    - ``max_inflight``: searches that work at once (default: the CPUs this process may use); ``max_queue``:
      requests that may wait for a slot (default 4 x ``max_inflight``); beyond it, and when the expected wait
      would use up a request's deadline, requests are answered 429 at once.
    - ``deadline_ms``: the deadline of a search that names none (ms, queueing included); ``max_batch``: the most
      questions in one ``/v1/search:batch`` (at most ``medretrieve.wire.MAX_BATCH``).
    - ``preload``: load the collection before the app starts serving (a worker then accepts connections only once
      it can answer them, and one that cannot load does not start); off, it loads in the background and
      ``/readyz`` says when it is done. ``medretrieve serve`` turns it on. ``startup_failure_file``: where a
      worker that could not load writes why (``medretrieve serve`` reports it and exits 2).
    - ``enable_reload``: allow ``POST /v1/admin/reload``; ``reload_stamp``: a file whose change tells every
      worker to reload (set by ``medretrieve serve`` when it runs several workers).
    - Limits on what a client may cost (:mod:`.limits`): ``max_body_bytes`` (a larger request body is refused with
      413 before it is read), ``body_timeout_s`` (the whole body must arrive within it, from the end of the
      headers, else 408), ``header_timeout_s`` (a connection must finish sending a request's headers within it,
      from its first byte, else 408 and closed; ``medretrieve serve`` only: it is enforced by the HTTP
      protocol, :mod:`.protocol`), ``max_connections`` (open connections per worker; one more is answered 503
      and closed at once; ``medretrieve serve`` only).
    - Who may call (:mod:`.keys`, :mod:`.auth`): ``api_keys``, the accepted keys as ``(sha256 hex digest, scopes)`` pairs
      (:func:`.keys.read_key_file`, :func:`.keys.parse_keys`, :func:`.keys.keys_from_env`; empty: no key is
      asked for); ``cors_origins``: the origins whose pages may call the API from a browser (empty: none but the
      server's own, CORS closed).
    """

    collection: str
    ranker: Optional[str] = "default"
    cross_encoder: Optional[str] = None
    query_encoder: Optional[str] = None
    training: Optional[tuple] = None
    llm_url: Optional[str] = None
    llm_model: Optional[str] = None
    llm_timeout_s: float = 30.0
    answer_concurrency: int = 8
    answer_deadline_ms: float = 60_000.0
    encoder_threads: int = 1
    max_inflight: int = field(default_factory=_cpus)
    max_queue: Optional[int] = None
    deadline_ms: float = DEFAULT_DEADLINE_MS
    max_batch: int = 64
    preload: bool = False
    startup_failure_file: Optional[str] = None
    enable_reload: bool = False
    reload_stamp: Optional[str] = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    body_timeout_s: float = 10.0
    header_timeout_s: float = 10.0
    max_connections: int = 1000
    api_keys: KeyDigests = ()
    cors_origins: Tuple[str, ...] = ()

    def __post_init__(self) -> None:
        set_ = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731 (frozen dataclass)
        set_("collection", str(self.collection))
        if self.training is not None:
            set_("training", tuple(str(t) for t in self.training))
        set_("api_keys", check_digests(self.api_keys))
        if isinstance(self.cors_origins, str) or not all(isinstance(o, str) and o for o in self.cors_origins):
            raise ValueError(f"cors_origins must be a list of origins like https://app.example.org, got "
                             f"{self.cors_origins!r}")
        set_("cors_origins", tuple(self.cors_origins))
        from ..wire import MAX_BATCH

        if not isinstance(self.max_batch, int) or not 1 <= self.max_batch <= MAX_BATCH:
            raise ValueError(f"max_batch must be an integer in [1, {MAX_BATCH}], got {self.max_batch!r}")
        for name in ("max_inflight", "answer_concurrency", "encoder_threads", "max_body_bytes", "max_connections"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if self.max_queue is not None and (not isinstance(self.max_queue, int) or self.max_queue < 0):
            raise ValueError(f"max_queue must be None or an integer >= 0, got {self.max_queue!r}")
        for name in ("deadline_ms", "answer_deadline_ms", "llm_timeout_s", "body_timeout_s", "header_timeout_s"):
            value = getattr(self, name)
            if not isinstance(value, (int, float)) or isinstance(value, bool) or not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        if (self.llm_url is None) != (self.llm_model is None):
            raise ValueError("llm_url and llm_model go together: give both (answers on) or neither")

    @property
    def queue_size(self) -> int:
        """Requests that may wait for a search slot: ``max_queue``, by default 4 x ``max_inflight``."""
        return 4 * self.max_inflight if self.max_queue is None else self.max_queue

    def check_paths(self) -> None:
        """FileNotFoundError naming the first configured file or directory that is missing (a fast check before
        workers start; the files' contents are checked when a worker loads them)."""
        if not (Path(self.collection) / "manifest.json").is_file():
            raise FileNotFoundError(f"{self.collection} is not a medretrieve collection (no manifest.json)")
        for name in ("ranker", "cross_encoder", "query_encoder"):
            value = getattr(self, name)
            if value is not None and not (name == "ranker" and value == "default") and not Path(value).exists():
                raise FileNotFoundError(f"{name} {value}: no such file or directory")
        for path in self.training or ():
            if not Path(path).is_file():
                raise FileNotFoundError(f"training file {path}: no such file")

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "ServerConfig":
        data: Dict[str, Any] = json.loads(text)
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"{CONFIG_ENV}: unknown settings {unknown}")
        return cls(**data)

    @classmethod
    def from_env(cls) -> "ServerConfig":
        text = os.environ.get(CONFIG_ENV)
        if not text:
            raise ValueError(f"{CONFIG_ENV} is not set (medretrieve serve sets it for its workers)")
        return cls.from_json(text)
