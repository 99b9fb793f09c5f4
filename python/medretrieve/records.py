"""What a search and an answer return, as plain records: :class:`Hit`, :class:`StageInfo`, :class:`SearchResult`,
:class:`Citation`, :class:`Answer`.

They are standard-library dataclasses with a JSON round trip (``to_dict`` / ``from_dict``), and this module
imports nothing else of medretrieve: the HTTP client (:mod:`medretrieve.client`) returns them without loading
the engine (the native core, numpy, the encoders). The engine fills them: ``Retriever.search`` makes a
``SearchResult``, ``Answerer.answer`` an ``Answer`` (``medretrieve.retrieval.results`` and
``medretrieve.generation.generate`` re-export them under their historical names).

``explain``: the whole record (the default) or a compact one for the wire, where stages carry no ``reason`` (the
learned ranker's reason alone names its provenance in ~700 bytes) and hits' per-stage ``scores`` are empty;
``from_dict`` reads both.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Dict, List, Literal, Mapping, Optional, Tuple, get_args

__all__ = ["Hit", "StageInfo", "SearchResult", "Citation", "Answer", "BioASQType", "BIOASQ_TYPES", "INSUFFICIENT",
           "source_facts"]

# Answer-level constants, defined here once because every floor uses them: the loader of BioASQ files and the
# Answerer's bioasq mode check a question type against BIOASQ_TYPES, the HTTP schema (wire.AnswerRequest) declares
# it, and an abstaining answer, the prompts and the metrics all speak the INSUFFICIENT phrase.
#: A BioASQ question type (a golden question's ``type``; the exact answer asked of an answer).
BioASQType = Literal["yesno", "factoid", "list", "summary"]
#: The BioASQ question types, in the challenge's order.
BIOASQ_TYPES: Tuple[str, ...] = get_args(BioASQType)
#: The exact phrase models are told to use instead of speculating, and the text of an abstaining answer.
INSUFFICIENT = "insufficient information"


@dataclass
class Hit:
    """One retrieved chunk. ``score`` is the score the list is ordered by, one scale per list (the rerank stage's;
    the normalised RRF score when reranking is off). ``placed_by`` names the stage that put the hit in its place
    rather than its score (``"recovery"``: it replaced a weak hit of the search); such a hit takes the score of the
    place it fills (0.0 when it was added below the ranked ones), so ``score`` still reads as the list's order, and
    its own measure is in ``scores`` (``scores["recovery"]``: the share of the question's words it holds).
    ``scores`` holds each stage's value for this chunk (``dense``, ``bm25``, ``rrf``, ``rerank``,
    ``cross_encoder``, ``mmr``, ``recovery``; empty in a compact record). ``span``: where the text sits in its source document, as BioASQ snippet fields (``beginSection``,
    ``endSection``, ``offsetInBeginSection``, ``offsetInEndSection``; :func:`medretrieve.corpus.spans.chunk_span`;
    and ``text``, the section's characters at those offsets, only where they differ from the chunk's
    whitespace-normalised ``text``), None when the source did not say where the chunk's section sits (JSONL or
    MedRAG text: no abstract; MEDLINE and BioASQ sources say)."""

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
    placed_by: Optional[str] = None

    def to_dict(self, explain: bool = True) -> Dict[str, Any]:
        """A JSON-ready dict (its containers are copies; values inside ``metadata`` are shared)."""
        return {**vars(self), "metadata": dict(self.metadata), "scores": dict(self.scores) if explain else {}}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Hit":
        """The inverse of :meth:`to_dict` (``scores`` may be left out: empty; ``span`` and ``placed_by``: None)."""
        return cls(**{"scores": {}, **data})


@dataclass
class StageInfo:
    """One stage of a search: ``ran`` or not, ``reason`` (what it did, or why it was skipped; empty in a compact
    record), ``elapsed_ms``, and ``cut``: the deadline made the stage skip or shrink its work (variants left
    unencoded, a cross-encoder depth cut, feedback, MMR or recovery skipped)."""

    name: str
    ran: bool
    reason: str = ""
    elapsed_ms: float = 0.0
    cut: bool = False

    def to_dict(self, explain: bool = True) -> Dict[str, Any]:
        out = dict(vars(self))
        if not explain:
            del out["reason"]
        return out


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

    def to_dict(self, explain: bool = True) -> Dict[str, Any]:
        """A JSON-ready dict of the result (hits and stages as dicts; compact without ``explain``, see the module
        docstring). Its containers are copies, but values inside a hit's ``metadata`` or the ``recovery`` report
        are shared. Why not ``dataclasses.asdict``: its deep copies cost ~1 ms for 10 hits, more than the rest of
        an HTTP response."""
        out = dict(vars(self))
        out["hits"] = [h.to_dict(explain) for h in self.hits]
        out["stages"] = [s.to_dict(explain) for s in self.stages]
        out["weak_reasons"] = list(self.weak_reasons)
        out["timings_ms"] = dict(self.timings_ms)
        out["expansions"] = {kind: list(terms) for kind, terms in self.expansions.items()}
        out["recovery"] = dict(self.recovery)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SearchResult":
        """The inverse of :meth:`to_dict` (for results that travelled as JSON, whole or compact)."""
        d = dict(data)
        d["hits"] = [Hit.from_dict(h) for h in d.get("hits", [])]
        d["stages"] = [StageInfo(**s) for s in d.get("stages", [])]
        return cls(**d)


@dataclass
class Citation:
    """One sentence of an answer and whether its cited sources support it.

    ``sources`` are the 1-based numbers cited in the sentence;
    ``invalid_sources`` those that name no provided source;
    ``support_score`` in [0, 1] is the better of the lexical overlap and (when
    an encoder was given) the cosine similarity; ``reason`` says why.
    """

    sentence: str
    sources: list[int]
    supported: bool
    support_score: float
    reason: str
    invalid_sources: list[int] = field(default_factory=list)


@dataclass
class Answer:
    """A grounded answer and everything needed to judge it.

    ``text`` is the answer (the ideal answer in BioASQ mode, "insufficient
    information" when abstaining); ``exact_answer`` is shaped as by
    :func:`~medretrieve.generation.parsers.parse_bioasq` (None when not asked for or not given);
    ``timings`` are ms for ``retrieve``, ``generate``, ``verify``, ``total``;
    ``error`` holds the LLM failure message (the pipeline does not raise it);
    ``sources_used`` is how many of the ``evidence`` hits (the first ones) were
    in the prompt -- fewer than all when the context overflowed and the
    Answerer retried with fewer -- and ``notes`` says what was adapted;
    ``shown_sources`` are the 1-based source numbers worth showing a reader: the
    cited ones and those scoring at least the Answerer's ``source_floor``
    (:data:`medretrieve.generation.generate.SOURCE_FLOOR`), in order; the other
    evidence stays in ``evidence`` (empty in an answer from before this field: show all).
    """

    question: str
    text: str
    exact_answer: Any = None
    citations: list[Citation] = field(default_factory=list)
    abstained: bool = False
    abstain_reason: str = ""
    evidence: list = field(default_factory=list)
    timings: dict = field(default_factory=dict)
    error: Optional[str] = None
    qtype: Optional[str] = None
    mode: str = "cite"
    raw: str = ""
    sources_used: int = 0
    notes: list[str] = field(default_factory=list)
    shown_sources: list[int] = field(default_factory=list)

    @property
    def unsupported(self) -> list[Citation]:
        """Citations whose sentence is not supported by its sources."""
        return [c for c in self.citations if not c.supported]

    def sources_to_show(self, all_sources: bool = False) -> list[int]:
        """The 1-based numbers of the sources a reader is shown, in order: ``shown_sources`` (cited, or scoring
        at least the floor), or every source the prompt held with ``all_sources`` and for an answer from before
        ``shown_sources`` (none shown, nothing cited, no abstention)."""
        offered = len(self.evidence[:self.sources_used or len(self.evidence)])
        if all_sources or not (self.shown_sources or self.citations or self.abstained):
            return list(range(1, offered + 1))
        return [n for n in self.shown_sources if 1 <= n <= offered]

    def to_dict(self, explain: bool = True) -> dict:
        """JSON-ready dict (evidence hits as dicts, compact without ``explain``)."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "evidence"}
        out["citations"] = [dataclasses.asdict(c) for c in self.citations]
        out["evidence"] = [_hit_dict(h, explain) for h in self.evidence]
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Answer":
        """The inverse of :meth:`to_dict` (for answers that travelled as JSON): citations become
        :class:`Citation`, evidence with a hit's fields a :class:`Hit`."""
        d = dict(data)
        d["citations"] = [Citation(**c) for c in d.get("citations", [])]
        d["evidence"] = [Hit.from_dict(h) if isinstance(h, Mapping) and _HIT_REQUIRED <= set(h) <= _HIT_FIELDS
                         else h for h in d.get("evidence", [])]
        return cls(**d)

    def submission_entry(self, question_id: str, qtype: Optional[str] = None) -> dict:
        """An entry for :func:`~medretrieve.generation.generate.write_bioasq_submission` (id, type, exact and
        ideal answer, documents)."""
        docs: Dict[str, str] = {}  # case-folded id -> the first spelling seen, in order
        for h in self.evidence:
            doc = str(h.get("document_id", "") if isinstance(h, Mapping) else getattr(h, "document_id", ""))
            if doc:
                docs.setdefault(doc.casefold(), doc)
        return {"id": question_id, "type": qtype or self.qtype or "summary", "exact_answer": self.exact_answer,
                "ideal_answer": self.text, "documents": list(docs.values())}


def source_facts(metadata: Any) -> Dict[str, Any]:
    """What a reader weighs a source by, from its document's metadata (a hit's ``metadata``): ``year`` (an integer)
    and ``publication_type`` (a list of names), each only where the metadata holds it, never guessed: ``{"year":
    2020, "publication_type": ["Systematic Review"]}``, ``{}`` for a document without them."""
    meta = metadata if isinstance(metadata, Mapping) else {}
    out: Dict[str, Any] = {}
    year = meta.get("year")
    if isinstance(year, int) and not isinstance(year, bool):
        out["year"] = year
    types = meta.get("publication_type")
    listed = [types] if isinstance(types, str) else list(types) if isinstance(types, (list, tuple)) else []
    listed = [t for t in listed if isinstance(t, str) and t]
    if listed:
        out["publication_type"] = listed
    return out


_HIT_FIELDS = {f.name for f in dataclasses.fields(Hit)}
_HIT_REQUIRED = _HIT_FIELDS - {"scores", "span", "placed_by"}


def _hit_dict(hit: Any, explain: bool) -> dict:
    if isinstance(hit, Hit):
        return hit.to_dict(explain)
    if dataclasses.is_dataclass(hit) and not isinstance(hit, type):
        return dataclasses.asdict(hit)
    if isinstance(hit, Mapping):
        return dict(hit)
    keys = ("chunk_id", "document_id", "title", "text", "section", "score", "scores", "metadata", "parent_id")
    return {k: getattr(hit, k) for k in keys if hasattr(hit, k)}
