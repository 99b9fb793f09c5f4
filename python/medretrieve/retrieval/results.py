"""What a search returns: :class:`Hit` (one chunk), :class:`StageInfo` (one stage), :class:`SearchResult`.

A result says what the search did: every stage, whether it ran, why not, and how long it took (ms), so a
caller can tell a deadline that cut a stage from a stage that was switched off.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from .budget import Deadline


@dataclass
class Hit:
    """One retrieved chunk. ``score`` is its relevance score (the rerank stage's; the normalised RRF score when
    reranking is off; a recovered hit's lexical relevance); ``scores`` holds each stage's value for this chunk
    (``dense``, ``bm25``, ``rrf``, ``rerank``, ``cross_encoder``, ``mmr``, ``recovery``). ``span``: where the
    text sits in its source document, as BioASQ snippet fields (``beginSection``, ``endSection``,
    ``offsetInBeginSection``, ``offsetInEndSection``; :func:`medretrieve.corpus.spans.chunk_span`), None when
    the collection does not know the chunk's section."""

    chunk_id: str
    document_id: str
    text: str
    title: str
    section: str
    score: float
    scores: Dict[str, float]
    metadata: Dict[str, Any]
    parent_id: Optional[str]
    span: Optional[Dict[str, Any]] = None


@dataclass
class StageInfo:
    """One stage of a search: ``ran`` or not, ``reason`` (what it did, or why it was skipped), ``elapsed_ms``, and
    ``cut``: the deadline made the stage skip or shrink its work (variants left unencoded, a cross-encoder
    depth cut, feedback, MMR or recovery skipped)."""

    name: str
    ran: bool
    reason: str
    elapsed_ms: float
    cut: bool = False


@dataclass
class SearchResult:
    """The hits of one search (best first) and what the search did to find them."""

    question: str
    hits: List[Hit]
    query_type: str
    weak: bool
    weak_reasons: List[str]
    recovered: bool
    stages: List[StageInfo]
    timings_ms: Dict[str, float]
    intent: str = "general"
    rerank_depth: int = 0
    expansions: Dict[str, List[str]] = field(default_factory=dict)
    recovery: Dict[str, Any] = field(default_factory=dict)
    # a sharded search (medretrieve.distributed): "answered" (shard names whose candidates are in the result),
    # "missed" (shard -> the deadline passed before it answered), "failed" (shard -> its error); {} for one
    # collection
    shards: Dict[str, Any] = field(default_factory=dict)

    @property
    def partial(self) -> bool:
        """A sharded search left shards out (they missed the deadline or failed): the hits come from the others."""
        return bool(self.shards.get("missed") or self.shards.get("failed"))

    def stage(self, name: str) -> Optional[StageInfo]:
        """The stage called ``name`` (None when the search did not reach it)."""
        return next((s for s in self.stages if s.name == name), None)

    @property
    def cut(self) -> List[str]:
        """Stages the deadline cut short or skipped: the hits may differ from an unhurried search's (``weak``
        does not: it never depends on timing)."""
        return [s.name for s in self.stages if s.cut]

    def to_dict(self) -> Dict[str, Any]:
        """A JSON-ready dict of the result (hits and stages as dicts). Its containers are copies, but values
        inside a hit's ``metadata`` or the ``recovery`` report are shared. Why not ``dataclasses.asdict``: its
        deep copies cost ~1 ms for 10 hits, more than the rest of an HTTP response."""
        out = dict(vars(self))
        out["hits"] = [{**vars(h), "scores": dict(h.scores), "metadata": dict(h.metadata)} for h in self.hits]
        out["stages"] = [dict(vars(s)) for s in self.stages]
        out["weak_reasons"] = list(self.weak_reasons)
        out["timings_ms"] = dict(self.timings_ms)
        out["expansions"] = {kind: list(terms) for kind, terms in self.expansions.items()}
        out["recovery"] = dict(self.recovery)
        return out

    @classmethod
    def from_dict(cls, data: Dict[str, Any]) -> "SearchResult":
        """The inverse of :meth:`to_dict` (for results that travelled as JSON)."""
        d = dict(data)
        d["hits"] = [Hit(**h) for h in d.get("hits", [])]
        d["stages"] = [StageInfo(**s) for s in d.get("stages", [])]
        return cls(**d)


class StageLog:
    """The stages of one search in the order they ran, each with the time its :class:`Deadline` measured."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.stages: List[StageInfo] = []

    def record(self, name: str, ran: bool, reason: str = "", cut: bool = False) -> None:
        """Add a stage; ``cut``: the deadline made it skip or shrink its work."""
        self.stages.append(StageInfo(name, ran, reason, self.deadline.timings_ms.get(name, 0.0), cut))
