"""Hybrid retrieval under a deadline: the product path from a question to evidence snippets.

``Retriever(collection).search(question, k=10, deadline_ms=300)`` runs:

1. ``classify``: query type (:func:`classify_query`) and clinical intent.
2. ``expand``: query variants (abbreviations, relations, training memory, LLM
   synonyms when a backend is configured); each variant is searched and fused.
3. ``encode`` + ``dense``: query vectors, native HNSW search with a per-query
   ef (from the query type's importance and the budget left) and, for
   treatment / symptom / test intents, a section-restricted first stage via
   index labels that falls back to the whole collection when it returns fewer
   than ``k`` chunks.
4. ``bm25``, ``feedback`` and ``fuse``: BM25 per variant; pseudo-relevance feedback (the question vector plus
   ``feedback_weight`` (1.0) x the mean vector of the top ``feedback_docs`` (3) chunks of the question's own fused
   lists, normalised, searched again; skipped when the budget is short); everything fused by RRF
   (``medretrieve.rrf``; the question's own lists and the feedback list weigh 1, each variant's
   ``variant_weight`` = 0.5; abbreviation expansions are added to the question's own text rather than searched as
   a variant).
5. ``rerank``: with a learned ranker (``ranker=``, a :class:`~medretrieve.rerank.LinearRanker` fitted by
   :meth:`Retriever.fit_ranker` or ``medretrieve fit-ranker`` on training questions) the score is its probability
   of relevance over the features in :mod:`medretrieve.rerank`; otherwise
   ``score = w_rrf rrf + w_keyword keyword + w_title title + w_entity entity``
   (+ ``w_ce ce`` with a cross-encoder; weights in ``DEFAULT_RERANK_WEIGHTS`` /
   ``DEFAULT_RERANK_WEIGHTS_CE``, overridable; ``ce`` = sigmoid of the logit; ``rrf`` normalised by the best;
   ``keyword`` / ``title`` = fraction of the question's content terms in the
   chunk / its title; ``entity`` = fraction of the question's entity-like
   tokens — with digits, hyphens or capitals, e.g. "IL-6", "BRCA1" — in the
   chunk, or ``keyword`` when there is none). With a cross-encoder and a learned ranker, the cross-encoder reads
   the candidates in the ranker's order and a scored candidate gets ``sigmoid(logit(p_ranker) + ranker_ce_weight x
   ce_logit)`` (default weight 0.5): both are relevance models, and adding logits kept their combined gain (about
   +0.01 document MAP@10 over the ranker's candidates on a BioASQ fold) where the fixed formula kept +0.001
   (bench/RESULTS.md). The cross-encoder runs in batches while the budget allows; the depth reached is reported.
6. ``mmr``: diversification with the query type's lambda (``medretrieve.lambda_for``,
   ``medretrieve.mmr`` over the stored vectors) among the candidates scoring within
   ``mmr_floor`` (0.95) of the best, skipped when time is short. (Over all candidates it
   cost 0.17 document MAP@10 on BioASQ, where near-duplicate evidence is still relevant.)
7. ``weak`` / ``recovery``: a question is weak when the lexical relevance of
   its top snippets (mean over the top 5 of the fraction of the question's
   content terms present in the snippet) is below 0.35, when the top ``k``
   come from fewer than 3 articles, or when they are redundant (mean pairwise
   token Jaccard of the top 5 above 0.6). Recovery searches extra variants
   and merges selectively: only hits whose lexical relevance is below the
   threshold are replaced, and only by better ones.
8. ``prune``: near-duplicates removed (token Jaccard >= 0.8), optional
   per-document limit; :func:`prune` cuts further for prompts (2 snippets).

Hits come in final order (after MMR and recovery). ``Hit.score`` is the
relevance score of step 5 (the normalised RRF score when reranking is off; a
recovered hit's score is its lexical relevance), ``Hit.scores`` holds every
stage's value (``dense``, ``bm25``, ``rrf``, ``rerank``, ``cross_encoder``,
``mmr``, ``recovery``). A Retriever keeps per-search state: use one per thread.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple, Union

import numpy as np

from .budget import Deadline
from .chunking import CATEGORY_IDS
from .expansion import (
    TrainingMemory,
    abbreviation_terms,
    classify_query,
    clinical_intent,
    content_terms,
    llm_terms,
    relation_terms,
    subject_words,
    training_pairs,
)
from .lexical import raw_tokens, tokenize
from .rerank import FEATURES, LinearRanker

__all__ = ["Hit", "StageInfo", "SearchResult", "Retriever", "classify_query", "prune", "format_result"]

# intent -> section categories searched first
ROUTES: Dict[str, Tuple[str, ...]] = {
    "treatment": ("treatment",),
    "symptom": ("symptoms",),
    "test": ("diagnosis",),
}
# Rerank formula weights. Without a cross-encoder they were chosen by a grid search on the
# BioASQ 7B1+7B2 questions (bench/RESULTS.md): keyword and title overlap did not help there on
# top of the fused rank, entity alignment a little. With a cross-encoder: an even split between
# the fused rank and the cross-encoder plus small heuristic terms (not tuned: no trained
# cross-encoder was available offline).
DEFAULT_RERANK_WEIGHTS: Dict[str, float] = {"rrf": 1.0, "keyword": 0.0, "title": 0.0, "entity": 0.05}
DEFAULT_RERANK_WEIGHTS_CE: Dict[str, float] = {"rrf": 0.45, "ce": 0.45, "keyword": 0.03, "title": 0.02,
                                               "entity": 0.05}
# query type -> ef multiplier (broad questions need more recall)
IMPORTANCE: Dict[str, float] = {"list": 1.5, "summary": 1.25, "factoid": 1.0, "yesno": 1.0}


@dataclass
class Hit:
    chunk_id: str
    document_id: str
    text: str
    title: str
    section: str
    score: float
    scores: Dict[str, float]
    metadata: Dict[str, Any]
    parent_id: Optional[str]


@dataclass
class StageInfo:
    name: str
    ran: bool
    reason: str
    elapsed_ms: float


@dataclass
class SearchResult:
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

    def stage(self, name: str) -> Optional[StageInfo]:
        return next((s for s in self.stages if s.name == name), None)

    def to_dict(self) -> Dict[str, Any]:
        return asdict(self)


# ----------------------------------------------------------------- helpers


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-np.clip(x, -30, 30)))


def _entities(question: str) -> List[str]:
    """Entity-like tokens of the question: with a digit, a hyphen, or written with 2+ capitals."""
    import re

    out = []
    for tok in re.findall(r"[^\W_]+(?:[-/][^\W_]+)*", question):
        if any(c.isdigit() for c in tok) or "-" in tok or sum(c.isupper() for c in tok) >= 2:
            out.append(tok.lower())
    return list(dict.fromkeys(out))


def _subject_share(subject: Sequence[Tuple[Set[str], int]], toks: Set[str]) -> float:
    """Share of the question's subject words (``expansion.subject_words``, weighted by piece count) in ``toks``."""
    total = sum(p for _, p in subject)
    return sum(p for ts, p in subject if ts & toks) / total if total else 0.0


def _alternatives(question: str) -> Dict[str, List[Set[str]]]:
    """Content term of an abbreviation in the question -> token sets of its expansions."""
    from .expansion import abbreviations

    table = abbreviations()
    out: Dict[str, List[Set[str]]] = {}
    import re

    for tok in re.findall(r"[^\W_]+(?:[-/'][^\W_]+)*", question):
        if tok in table:
            key = tokenize(tok)
            if key:
                out.setdefault(key[0], []).extend(set(tokenize(e)) for e in table[tok])
    return out


def _term_match(q_terms: Sequence[str], toks: Set[str], alts: Dict[str, List[Set[str]]]) -> float:
    hit = 0
    for t in q_terms:
        if t in toks or any(a and a <= toks for a in alts.get(t, ())):
            hit += 1
    return hit / len(q_terms)


def _jaccard(a: Set[str], b: Set[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def prune(hits: Union["SearchResult", Sequence[Hit]], per_question: int = 2, per_document: int = 1,
          near_duplicate: float = 0.8) -> List[Hit]:
    """Snippets for a prompt: best first, at most ``per_document`` per document and ``per_question``
    in all, dropping near-duplicates (token Jaccard >= ``near_duplicate``)."""
    if isinstance(hits, SearchResult):
        hits = hits.hits
    _check_settings(per_question=per_question, per_document=per_document, near_duplicate=near_duplicate)
    out: List[Hit] = []
    per_doc: Dict[str, int] = {}
    seen: List[Set[str]] = []
    for h in hits:
        if per_doc.get(h.document_id, 0) >= per_document:
            continue
        toks = set(tokenize(h.text))
        if any(_jaccard(toks, s) >= near_duplicate for s in seen):
            continue
        out.append(h)
        seen.append(toks)
        per_doc[h.document_id] = per_doc.get(h.document_id, 0) + 1
        if len(out) >= per_question:
            break
    return out


@dataclass
class _Gathered:
    """What the first stages hand to reranking (internal)."""

    qtype: str
    intent: str
    q_terms: List[str]
    subject: List[Tuple[Set[str], int]]  # expansion.subject_words of the question
    variants: Dict[str, str]
    exp_terms: Dict[str, List[str]]
    texts: List[str]  # the question's own text (with abbreviation expansions) first, then the variants
    qvecs: Optional[np.ndarray]
    fb_vec: Optional[np.ndarray]
    fused_ids: np.ndarray
    fused_scores: np.ndarray
    scored: Dict[str, Dict[int, float]]
    question_bm25: Optional[np.ndarray]  # BM25 of texts[0] over every row (None when BM25 was off)


class _Ema:
    """Exponential moving average of a cost (ms), seeded with a prior."""

    def __init__(self, prior: float, alpha: float = 0.2) -> None:
        self.value = prior
        self.alpha = alpha

    def update(self, x: float) -> None:
        # one outlier (a cold start, a descheduled thread) moves the estimate at most 2x
        x = min(max(x, self.value / 2.0), self.value * 2.0)
        self.value = (1 - self.alpha) * self.value + self.alpha * x


# ----------------------------------------------------------------- the retriever


# setting -> (integer only, lowest, highest); None: unbounded on that side
_SETTING_RANGES: Dict[str, Tuple[bool, Optional[float], Optional[float]]] = {
    "candidates": (True, 1, None), "rrf_k": (False, 0.0, None), "variant_weight": (False, 0.0, None),
    "ef_base": (True, 1, None), "ef_min": (True, 1, None), "ef_max": (True, 1, None),
    "rerank_depth": (True, 0, None), "weak_threshold": (False, 0.0, 1.0), "min_articles": (True, 0, None),
    "redundancy_threshold": (False, 0.0, 1.0), "near_duplicate": (False, 0.0, None),
    "llm_min_ms": (False, 0.0, None), "mmr_floor": (False, 0.0, 1.0), "feedback_weight": (False, 0.0, None),
    "feedback_docs": (True, 1, None), "per_question": (True, 1, None), "per_document": (True, 1, None),
    "ranker_ce_weight": (False, 0.0, None),
}


def _is_number(value: Any, integer: bool = False) -> bool:
    """A finite int or float (an int when ``integer``); bools are not numbers here."""
    kind = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    return not isinstance(value, bool) and isinstance(value, kind) and math.isfinite(value)


def _check_settings(**values: Any) -> None:
    """ValueError naming the first setting (of :data:`_SETTING_RANGES`) that is not a finite number in its range."""
    for name, value in values.items():
        integer, lo, hi = _SETTING_RANGES[name]
        if not _is_number(value, integer) or (lo is not None and value < lo) or (hi is not None and value > hi):
            what = "an integer" if integer else "a finite number"
            bounds = f" >= {lo}" if hi is None else f" in [{lo}, {hi}]"
            raise ValueError(f"{name} must be {what}{bounds}, got {value!r}")
    if values.get("near_duplicate") == 0:
        raise ValueError("near_duplicate must be > 0 (a Jaccard of 0 would drop every hit after the first)")
    if "ef_min" in values and values["ef_min"] > values["ef_max"]:
        raise ValueError(f"ef_min ({values['ef_min']}) must not exceed ef_max ({values['ef_max']})")


def _check_weights(name: str, weights: Optional[Dict[str, float]], defaults: Dict[str, float]) -> None:
    if weights is None:
        return
    unknown = sorted(set(weights) - set(defaults))
    if unknown:
        raise ValueError(f"{name}: unknown weights {unknown}; known: {sorted(defaults)}")
    for key, w in weights.items():
        if not _is_number(w) or w < 0:
            raise ValueError(f"{name}[{key!r}] must be a finite number >= 0, got {w!r}")


class Retriever:
    """Hybrid dense + BM25 retrieval over a :class:`~medretrieve.collection.Collection`.

    ``cross_encoder``: a :class:`~medretrieve.encoders.CrossEncoder` or its
    directory; ``llm``: a backend with ``generate(messages, ...)`` (H4) for LLM
    synonyms; ``training``: a :class:`~medretrieve.expansion.TrainingMemory` or
    a list of BioASQ golden files for training-memory expansion; ``ranker``: a
    :class:`~medretrieve.rerank.LinearRanker` or its JSON file (see :meth:`fit_ranker`).
    ``subject_boost``: the question's subject words (``expansion.subject_words``: outside a general-English
    vocabulary, e.g. a drug or gene name) count ``1 + subject_boost`` times in its BM25 query; 0 gives plain
    BM25. Why: in a collection gathered around a topic, the subject of a question is common and its idf low,
    so plain BM25 lets "mechanism" + "action" outweigh "motolimod". The default (None) boosts once without a
    learned ranker and not at all with one, whose ``doc_subject`` feature weighs that evidence itself;
    measured on the BioASQ closed corpus (bench/RESULTS.md, document MAP@10): BM25 alone 0.798 -> 0.869,
    the pipeline without a ranker 0.885 -> 0.893, with a ranker 0.916 -> 0.912.
    ``warmup`` (default True): :meth:`warmup` at construction, which also takes the objects alive
    then out of Python's cyclic garbage collector (``gc.freeze``).

    Tuning (each checked here, so a bad value fails at construction rather than as odd results):

    - ``candidates`` (>= 1): fused candidates kept for reranking; ``rrf_k`` (>= 0): the RRF constant;
      ``variant_weight`` (>= 0): RRF weight of an expansion's list, the question's own lists weigh 1.
    - ``ef_base`` / ``ef_min`` / ``ef_max`` (1 <= ef_min <= ef_max): HNSW ef, ``ef_base`` scaled by the query
      type's importance and the share of the deadline left, clamped to [ef_min, ef_max].
    - ``rerank_depth`` (>= 0): most pairs a cross-encoder scores; ``rerank_weights`` / ``rerank_weights_ce``:
      overrides of the formula's weights (keys of ``DEFAULT_RERANK_WEIGHTS`` / ``_CE``, finite, >= 0).
    - ``weak_threshold`` (0-1): lexical relevance of the top 5 below which a question is weak;
      ``min_articles`` (>= 0): fewer distinct documents in the hits is weak; ``redundancy_threshold`` (0-1):
      mean pairwise token Jaccard of the top 5 above which it is weak.
    - ``near_duplicate`` (> 0): a hit whose token Jaccard with an earlier hit reaches it is dropped; above 1
      nothing is dropped. Measured on BioASQ (bench/RESULTS.md) it costs every system about 0.003 document
      MAP@10, because it also drops another document's copy of a sentence; it keeps prompts free of repeats.
    - ``llm_min_ms`` (>= 0): time that must be left for LLM synonyms to be asked for; ``mmr_floor`` (0-1):
      MMR reorders only candidates scoring at least this share of the best.
    - ``feedback_weight`` (>= 0) / ``feedback_docs`` (>= 1): pseudo-relevance feedback, the mean vector of
      the top ``feedback_docs`` fused chunks added with this weight.
    - ``ranker_ce_weight`` (>= 0): with a cross-encoder and a learned ranker, the weight of the cross-encoder's
      logit added to the ranker's (on one BioASQ fold, two runs: 0.5 and 1 within 0.005 of each other, both
      about +0.01 over the ranker alone; 0.25 and 2 lower).
    """

    def __init__(
        self,
        collection,
        cross_encoder=None,
        llm=None,
        training=None,
        *,
        candidates: int = 100,
        rrf_k: float = 60.0,
        variant_weight: float = 0.5,
        ef_base: int = 64,
        ef_min: int = 32,
        ef_max: int = 256,
        rerank_depth: int = 50,
        weak_threshold: float = 0.35,
        min_articles: int = 3,
        redundancy_threshold: float = 0.6,
        near_duplicate: float = 0.8,
        llm_min_ms: float = 150.0,
        mmr_floor: float = 0.95,
        rerank_weights: Optional[Dict[str, float]] = None,
        rerank_weights_ce: Optional[Dict[str, float]] = None,
        ranker: Union[LinearRanker, str, "os.PathLike[str]", None] = None,
        feedback_weight: float = 1.0,
        feedback_docs: int = 3,
        subject_boost: Optional[int] = None,
        ranker_ce_weight: float = 0.5,
        warmup: bool = True,
    ) -> None:
        self.collection = collection
        if isinstance(cross_encoder, (str, bytes)) or hasattr(cross_encoder, "__fspath__"):
            from .encoders import CrossEncoder

            cross_encoder = CrossEncoder.from_dir(cross_encoder)
        self.cross_encoder = cross_encoder
        self.llm = llm
        if training is not None and not isinstance(training, TrainingMemory):
            training = TrainingMemory.from_bioasq(training)
        self.training = training
        _check_settings(candidates=candidates, rrf_k=rrf_k, variant_weight=variant_weight, ef_base=ef_base,
                        ef_min=ef_min, ef_max=ef_max, rerank_depth=rerank_depth, weak_threshold=weak_threshold,
                        min_articles=min_articles, redundancy_threshold=redundancy_threshold,
                        near_duplicate=near_duplicate, llm_min_ms=llm_min_ms, mmr_floor=mmr_floor,
                        feedback_weight=feedback_weight, feedback_docs=feedback_docs,
                        ranker_ce_weight=ranker_ce_weight)
        _check_weights("rerank_weights", rerank_weights, DEFAULT_RERANK_WEIGHTS)
        _check_weights("rerank_weights_ce", rerank_weights_ce, DEFAULT_RERANK_WEIGHTS_CE)
        self.candidates = candidates
        self.rrf_k = rrf_k
        self.variant_weight = variant_weight
        self.ef_base, self.ef_min, self.ef_max = ef_base, ef_min, ef_max
        self.rerank_depth = rerank_depth
        self.weak_threshold = weak_threshold
        self.min_articles = min_articles
        self.redundancy_threshold = redundancy_threshold
        self.near_duplicate = near_duplicate
        self.llm_min_ms = llm_min_ms
        self.mmr_floor = mmr_floor
        self.rerank_weights = {**DEFAULT_RERANK_WEIGHTS, **(rerank_weights or {})}
        self.rerank_weights_ce = {**DEFAULT_RERANK_WEIGHTS_CE, **(rerank_weights_ce or {})}
        # running cost estimates (ms) used by the budget controller
        self._encode_ms = _Ema(15.0)
        self._ce_pair_ms = _Ema(4.0)
        self._feedback_ms = _Ema(10.0)
        if ranker is not None and not isinstance(ranker, LinearRanker):
            ranker = LinearRanker.load(ranker)
        self.ranker = ranker
        self.feedback_weight = float(feedback_weight)
        self.feedback_docs = int(feedback_docs)
        self.ranker_ce_weight = float(ranker_ce_weight)
        if subject_boost is not None and (not isinstance(subject_boost, (int, np.integer))
                                          or isinstance(subject_boost, bool) or subject_boost < 0):
            raise ValueError(f"subject_boost must be None or a non-negative integer, got {subject_boost!r}")
        self.subject_boost = subject_boost
        self._tok_cache: Dict[int, Set[str]] = {}
        self._local = threading.local()  # per-thread search state (abbreviation alternatives)
        if warmup:
            self.warmup()

    def warmup(self) -> None:
        """Load the encoders and run them once, so the first search does not pay session start-up; then
        collect garbage once and freeze what is alive (``gc.freeze``).

        Why the freeze: a collection's rows and token lists are hundreds of thousands of long-lived Python
        objects, and every full (generation 2) collection walks them all; at 100k chunks one such pass stalled
        a search for 0.44 s (bench/RESULTS.md). Frozen objects are still freed by reference counting; only
        reference cycles among them are never reclaimed, which long-lived index data does not form.
        """
        import gc

        from .expansion import abbreviations, relations

        abbreviations(), relations(), tokenize("warm up"), subject_words("warm up motolimod")
        col = self.collection
        if len(col):
            if self.ranker is not None:  # document frequencies and the document -> chunks map, built once
                col.lexical.idf(["warm"])
                col.document_rows("")
            col.encode_queries(["warm up"])
            col.encode_queries(["warm up", "warm up two"])
            if self.cross_encoder is not None:
                import time as _t

                r = col.rows[int(np.flatnonzero(col.alive)[0])]
                self.cross_encoder.score("warm up", [(r.title, r.text)] * 8)  # cold: session start-up
                t0 = _t.perf_counter()
                self.cross_encoder.score("warm up", [(r.title, r.text)] * 8)
                self._ce_pair_ms.value = (_t.perf_counter() - t0) * 1000.0 / 8
        gc.collect()
        gc.freeze()

    # ------------------------------------------------------------- small utilities
    @property
    def _alts(self) -> Dict[str, List[Set[str]]]:
        return getattr(self._local, "alts", {})

    def _row_tokens(self, row: int) -> Set[str]:
        """BM25 tokens of a chunk (title, overlap and text), as the lexical index stored them (tokenising the
        candidates' documents again cost ~4 ms of a 19 ms p50 search at 100k chunks)."""
        toks = self._tok_cache.get(row)
        if toks is None:
            stored = self.collection.lexical.tokens_of(row)
            if stored is None:  # not in the lexical index (deleted): tokenise the text
                r = self.collection.rows[row]
                stored = tokenize(f"{r.title} {r.overlap} {r.text}")
            toks = set(stored)
            if len(self._tok_cache) > 200_000:
                self._tok_cache.clear()
            self._tok_cache[row] = toks
        return toks

    def _doc_tokens(self, document_id: str) -> Set[str]:
        """BM25 tokens of a document's first 64 live chunks."""
        toks: Set[str] = set()
        for r in self.collection.document_rows(document_id)[:64]:
            toks |= self._row_tokens(r)
        return toks

    def _lexrel(self, q_terms: Sequence[str], row: int) -> float:
        """Fraction of the question's content terms in the chunk (an abbreviation also matches its
        expansion: all of the expansion's terms present)."""
        if not q_terms:
            return 0.0
        return _term_match(q_terms, self._row_tokens(row), self._alts)

    def _variants(self, question: str, qtype: str, intent: str, dl: Deadline, kinds: Sequence[str],
                  n_terms: int = 8, n_neighbours: int = 3) -> Tuple[Dict[str, str], Dict[str, List[str]], str]:
        """Query variants by expansion kind; also the terms used and a note on skipped kinds."""
        variants: Dict[str, str] = {}
        terms: Dict[str, List[str]] = {}
        notes = []
        for kind in kinds:
            found: List[str] = []
            if kind == "abbreviations":
                found = abbreviation_terms(question)
            elif kind == "relations":
                rel_kinds = ("disease_treatment", "gene_pathway") if intent == "treatment" else ("gene_pathway",)
                found = relation_terms(question, rel_kinds)
            elif kind == "training":
                if self.training is None:
                    continue
                found = self.training.key_terms(question, n_neighbours=n_neighbours, n_terms=n_terms)
            elif kind == "llm":
                if self.llm is None:
                    continue
                if dl.remaining_ms() < self.llm_min_ms:
                    notes.append(f"llm skipped: {dl.remaining_ms():.0f} ms left < {self.llm_min_ms:.0f}")
                    continue
                try:
                    rem = dl.remaining_ms()
                    found = llm_terms(self.llm, question, "synonyms",
                                      deadline_ms=None if math.isinf(rem) else max(rem - 50.0, 1.0))
                except Exception as exc:  # LLMError or an unreadable reply: search goes on without it
                    notes.append(f"llm failed: {type(exc).__name__}: {exc}"[:200])
                    continue
            if found:
                terms[kind] = found
                variants[kind] = question + " " + " ".join(found)
        return variants, terms, "; ".join(notes)

    def _ef(self, qtype: str, dl: Deadline, deadline_ms: Optional[float]) -> int:
        imp = IMPORTANCE.get(qtype, 1.0)
        frac = 1.0 if deadline_ms is None or deadline_ms <= 0 else min(1.0, max(0.25, dl.remaining_ms() / deadline_ms))
        ef = int(self.ef_base * imp * frac)
        return int(min(self.ef_max, max(self.ef_min, ef)))

    def _first_stage(self, texts: Sequence[str], qvecs: Optional[np.ndarray], efs: Sequence[int], k: int,
                     labels: Optional[List[int]], dl: Deadline, boost: Sequence[str] = ()
                     ) -> Tuple[List[np.ndarray], List[np.ndarray], List[str], Optional[np.ndarray]]:
        """Dense and BM25 lists for each text (dense only for rows of ``qvecs``), and the BM25 score vector of
        the first text (the question's own; the ranker's ``bm25`` feature reads it), None without texts.
        ``boost``: extra BM25 query tokens for the first text (its subject words, see ``subject_boost``)."""
        col = self.collection
        ids_lists: List[np.ndarray] = []
        score_lists: List[np.ndarray] = []
        kinds: List[str] = []
        alive = col.alive
        if qvecs is not None and len(qvecs):
            with dl.stage("dense"):
                kk = min(k, max(len(col), 1))
                ids, scores = col.dense.search(qvecs, k=kk, ef=np.asarray(efs, dtype=np.int64),
                                               labels=labels)
                ids = np.asarray(ids, dtype=np.int64).reshape(len(qvecs), -1)
                scores = np.asarray(scores, dtype=np.float32).reshape(len(qvecs), -1)
                for i in range(len(qvecs)):
                    ok = ids[i] >= 0
                    ok[ok] = alive[ids[i][ok]]
                    ids_lists.append(ids[i][ok])
                    score_lists.append(scores[i][ok])
                    kinds.append("dense")
        question_bm25 = None
        with dl.stage("bm25"):
            allowed = alive if labels is None else alive & np.isin(col.labels, labels)
            for j, t in enumerate(texts):
                all_scores = col.lexical.scores(t, extra_tokens=boost if j == 0 else ())
                if j == 0:
                    question_bm25 = all_scores
                ids, scores = col.lexical.top(all_scores, k=k, allowed=allowed)
                ids_lists.append(ids)
                score_lists.append(scores)
                kinds.append("bm25")
        return ids_lists, score_lists, kinds, question_bm25

    def _gather(self, question: str, k: int, dl: Deadline, deadline_ms: Optional[float], record, *,
                expand: bool, route: bool, dense: bool, lexical: bool, feedback: bool,
                ranked: bool = False) -> "_Gathered":
        """Stages 1-4 (classify, expand, encode, first stage, feedback, fuse): the fused candidates.
        ``ranked``: a learned ranker will order them (it decides the default ``subject_boost``)."""
        col = self.collection
        with dl.stage("classify"):
            qtype = classify_query(question)
            intent = clinical_intent(question)
            q_terms = content_terms(question)
            subject = subject_words(question)
            self._local.alts = _alternatives(question)
        record("classify", True, f"{qtype} / intent {intent}")

        # -- expansions
        variants: Dict[str, str] = {}
        exp_terms: Dict[str, List[str]] = {}
        if expand:
            with dl.stage("expand"):
                variants, exp_terms, note = self._variants(question, qtype, intent, dl,
                                                           ("abbreviations", "relations", "training", "llm"))
            record("expand", True, (", ".join(f"{k_}: {len(v)} terms" for k_, v in exp_terms.items())
                                    or "no expansion terms found") + (f"; {note}" if note else ""))
        else:
            record("expand", False, "disabled")

        # -- encode (the question always; variants only while the budget allows)
        # An abbreviation expansion only spells out the question's own terms ("MI" -> "myocardial infarction"),
        # so it joins the question's own lists instead of standing as a down-weighted variant.
        texts = [variants.pop("abbreviations", question)] + list(variants.values())
        qvecs = None
        if dense:
            n_enc = 1
            reserve = 0.35 * dl.budget_ms if not math.isinf(dl.budget_ms) else 0.0
            while n_enc < len(texts) and dl.remaining_ms() - reserve > (n_enc + 1) * self._encode_ms.value:
                n_enc += 1
            with dl.stage("encode"):
                qvecs = col.encode_queries(texts[:n_enc])
            self._encode_ms.update(dl.timings_ms["encode"] / n_enc)
            record("encode", True, f"{n_enc} of {len(texts)} query texts"
                   + ("" if n_enc == len(texts) else " (budget: variants searched by BM25 only)"))
        else:
            record("encode", False, "dense retrieval disabled")
        bm25_texts = texts if lexical else []
        # the question's subject words count 1 + subject_boost times in its BM25 query (see __init__)
        times = self.subject_boost if self.subject_boost is not None else (0 if ranked else 1)
        boost = [t for ts, _ in subject for t in sorted(ts)] * times

        # -- first stage, section-routed when the intent has a route
        ef = self._ef(qtype, dl, deadline_ms)
        ncand = max(self.candidates, k)
        route_cats = ROUTES.get(intent, ()) if route else ()
        route_labels = [CATEGORY_IDS[c] for c in route_cats]
        if route_labels and not np.isin(col.labels[col.alive], route_labels).any():
            route_labels = []
        lists: List[np.ndarray] = []
        weights: List[float] = []
        scored: Dict[str, Dict[int, float]] = {"dense": {}, "bm25": {}}
        question_bm25: List[Optional[np.ndarray]] = [None]

        def run_first(labels: Optional[List[int]]) -> List[np.ndarray]:
            efs = [max(ef, ncand)] + [max(ef // 2, ncand)] * (0 if qvecs is None else len(qvecs) - 1)
            ids_l, sc_l, kinds, question_bm25[0] = self._first_stage(bm25_texts, qvecs, efs, ncand, labels, dl,
                                                                     boost)
            out = []
            n_dense = 0 if qvecs is None else len(qvecs)
            for j, (ids, sc, kind) in enumerate(zip(ids_l, sc_l, kinds)):
                is_question = (kind == "dense" and j == 0) or (kind == "bm25" and j == n_dense)
                lists.append(ids)
                weights.append(1.0 if is_question else self.variant_weight)
                if is_question:
                    for i_, s_ in zip(ids.tolist(), sc.tolist()):
                        scored[kind].setdefault(i_, s_)
                out.append(ids)
            return out

        search_labels = None
        if route_labels:
            routed = run_first(route_labels)
            search_labels = route_labels
            n_routed = len(np.unique(np.concatenate(routed))) if routed else 0
            if n_routed < k:
                run_first(None)
                search_labels = None
                route_note = (f"{'/'.join(route_cats)} sections gave {n_routed} < {k} chunks: "
                              "fell back to the whole collection")
            else:
                route_note = f"{'/'.join(route_cats)} sections: {n_routed} chunks"
            record("route", True, route_note)
        else:
            run_first(None)
            record("route", False, "no section route for intent " + intent if route else "disabled")
        record("dense", qvecs is not None, f"ef={ef}" if qvecs is not None else "disabled")
        record("bm25", lexical, f"{len(bm25_texts)} query texts" if lexical else "disabled")

        fb_vec = None
        if feedback and qvecs is not None and any(len(x) for x in lists):
            fb_vec, fb_ids, fb_note = self._feedback(qvecs[0], lists, weights, max(ef, ncand), ncand,
                                                     search_labels, dl)
            if fb_ids is not None:
                lists.append(fb_ids)
                weights.append(1.0)
            record("feedback", fb_vec is not None, fb_note)
        else:
            record("feedback", False, "disabled" if not feedback else "no dense candidates")

        with dl.stage("fuse"):
            from . import rrf

            fused_ids, fused_scores = rrf(lists, k=self.rrf_k, weights=weights, top_n=ncand)
            fused_ids = np.asarray(fused_ids, dtype=np.int64)
            fused_scores = np.asarray(fused_scores, dtype=np.float32)
        record("fuse", True, f"RRF of {len(lists)} lists -> {len(fused_ids)} candidates")
        return _Gathered(qtype, intent, q_terms, subject, variants, exp_terms, texts, qvecs,
                         fb_vec, fused_ids, fused_scores, scored, question_bm25[0])

    def _feedback(self, qvec: np.ndarray, lists: Sequence[np.ndarray], weights: Sequence[float], ef: int,
                  ncand: int, labels: Optional[List[int]], dl: Deadline):
        """Pseudo-relevance feedback: the question vector moved towards the mean of the top fused chunks
        of the question's own lists, searched again. Returns (vector, ids, note); (None, None, note)
        when skipped."""
        from . import rrf

        reserve = 0.35 * dl.budget_ms if not math.isinf(dl.budget_ms) else 0.0
        if dl.remaining_ms() - reserve < 2.0 * self._feedback_ms.value:
            return None, None, f"budget: {dl.remaining_ms():.0f} ms left"
        with dl.stage("feedback"):
            own = [ids for ids, w in zip(lists, weights) if w == 1.0]
            top, _ = rrf(own, k=self.rrf_k, top_n=self.feedback_docs)
            top = np.asarray(top, dtype=np.int64)
            vec = qvec + self.feedback_weight * self.collection.vectors(top).mean(axis=0)
            vec = (vec / max(float(np.linalg.norm(vec)), 1e-12)).astype(np.float32)
            col = self.collection
            ids, _ = col.dense.search(vec[None, :], k=min(ncand, max(len(col), 1)), ef=ef, labels=labels)
            ids = np.asarray(ids, dtype=np.int64).reshape(-1)
            ids = ids[ids >= 0]
            ids = ids[col.alive[ids]]
        self._feedback_ms.update(dl.timings_ms["feedback"])
        return vec, ids, f"question + {self.feedback_weight:g} x mean of the top {len(top)} fused chunks"

    # ------------------------------------------------------------- search
    def search(
        self,
        question: str,
        k: int = 10,
        deadline_ms: Optional[float] = 300,
        *,
        expand: bool = True,
        rerank: bool = True,
        diversify: bool = True,
        recover: bool = True,
        route: bool = True,
        dense: bool = True,
        lexical: bool = True,
        feedback: bool = True,
        per_document: Optional[int] = None,
    ) -> SearchResult:
        """Best ``k`` chunks for ``question`` within ``deadline_ms`` (None: no deadline).

        The switches turn stages off (for ablations): ``dense`` / ``lexical``
        (at least one), ``expand``, ``rerank``, ``diversify`` (MMR),
        ``recover``, ``route`` (section routing), ``feedback`` (pseudo-relevance
        feedback). ``per_document`` caps hits
        per document.
        """
        if not isinstance(question, str) or not question.strip():
            raise ValueError("question must be a non-empty string")
        if not isinstance(k, (int, np.integer)) or k < 1:
            raise ValueError(f"k must be a positive integer, got {k!r}")
        if not (dense or lexical):
            raise ValueError("at least one of dense and lexical retrieval must be on")
        if per_document is not None:
            _check_settings(per_document=per_document)
        dl = Deadline(deadline_ms)
        stages: List[StageInfo] = []

        def record(name: str, ran: bool, reason: str = "") -> None:
            stages.append(StageInfo(name, ran, reason, dl.timings_ms.get(name, 0.0)))

        g = self._gather(question, k, dl, deadline_ms, record, expand=expand, route=route, dense=dense,
                         lexical=lexical, feedback=feedback, ranked=rerank and self.ranker is not None)
        col = self.collection
        qtype, intent, q_terms, qvecs = g.qtype, g.intent, g.q_terms, g.qvecs
        variants, exp_terms, fused_ids, fused_scores, scored = (g.variants, g.exp_terms, g.fused_ids,
                                                                g.fused_scores, g.scored)

        # -- rerank
        order, final_scores, rerank_scores, depth, ce_scores = self._rerank(question, g, dl, rerank, stages)

        # -- MMR
        cand_rows = order
        mmr_scores: Dict[int, float] = {}
        with dl.stage("mmr"):
            mmr_ran, mmr_note, cand_rows, mmr_scores = self._mmr(question, qtype, qvecs, order, final_scores, k,
                                                                 dl, diversify)
        record("mmr", mmr_ran, mmr_note)

        # -- select k with near-duplicate removal / per-document cap
        with dl.stage("prune"):
            top = self._select(cand_rows, k, per_document)
        record("prune", True, f"{len(cand_rows)} candidates -> {len(top)} hits")

        # -- weak-question detection and recovery
        with dl.stage("weak"):
            weak_reasons = self._weak_reasons(q_terms, top, k)
        record("weak", True, "; ".join(weak_reasons) or "not weak")
        recovered, recovery = False, {}
        if weak_reasons and recover:
            if dl.remaining_ms() > 0.25 * (dl.budget_ms if not math.isinf(dl.budget_ms) else 100.0):
                with dl.stage("recovery"):
                    top, recovery = self._recover(question, qtype, intent, q_terms, top, k, variants, dl,
                                                  per_document, g.subject)
                recovered = recovery.get("replaced", 0) > 0
                record("recovery", True, recovery.get("note", ""))
            else:
                record("recovery", False, f"budget: {dl.remaining_ms():.0f} ms left")
        else:
            record("recovery", False, "question not weak" if recover else "disabled")

        score_of = dict(zip(order, final_scores))
        rr_of = dict(zip(fused_ids.tolist(), fused_scores.tolist()))
        hits: List[Hit] = []
        for row in top:
            r = col.rows[row]
            sc: Dict[str, float] = {}
            if row in scored["dense"]:
                sc["dense"] = float(scored["dense"][row])
            if row in scored["bm25"]:
                sc["bm25"] = float(scored["bm25"][row])
            if row in rr_of:
                sc["rrf"] = float(rr_of[row])
            if row in rerank_scores:
                sc["rerank"] = float(rerank_scores[row])
            if row in ce_scores:
                sc["cross_encoder"] = float(ce_scores[row])
            if row in mmr_scores:
                sc["mmr"] = float(mmr_scores[row])
            if row in recovery.get("added_rows", ()):
                sc["recovery"] = self._lexrel(q_terms, row)
                score = sc["recovery"]
            else:
                score = score_of.get(row, sc.get("rrf", 0.0))
            hits.append(Hit(r.chunk_id, r.document_id, r.text, r.title, r.section, float(score), sc,
                            dict(r.metadata), r.parent_id))
        recovery.pop("added_rows", None)
        timings = dl.finish()
        return SearchResult(question, hits, qtype, bool(weak_reasons), weak_reasons, recovered, stages, timings,
                            intent=intent, rerank_depth=depth, expansions=exp_terms, recovery=recovery)

    # ------------------------------------------------------------- stages
    def _rerank(self, question: str, g: _Gathered, dl: Deadline, enabled: bool, stages: List[StageInfo]):
        """Returns (rows in new order, their final scores, rerank scores, CE depth, CE scores)."""
        q_terms, fused_ids, fused_scores = g.q_terms, g.fused_ids, g.fused_scores
        rows = fused_ids.tolist()
        base = fused_scores / max(float(fused_scores[0]), 1e-12) if len(fused_scores) else fused_scores
        if not enabled or not rows:
            stages.append(StageInfo("rerank", False, "disabled" if not enabled else "no candidates", 0.0))
            return rows, base.tolist(), {}, 0, {}
        if dl.expired():
            stages.append(StageInfo("rerank", False, f"budget: deadline passed ({dl.remaining_ms():.1f} ms)", 0.0))
            return rows, base.tolist(), {}, 0, {}
        ce: Dict[int, float] = {}
        depth = 0
        with dl.stage("rerank"):
            ents = _entities(question)
            n = min(len(rows), max(self.rerank_depth, 1)) if self.cross_encoder is not None else len(rows)
            # the learned ranker's probability stands in for the fused rank (and, without a
            # cross-encoder, for the whole heuristic formula); with both, the cross-encoder reads the
            # candidates in the ranker's order, so a budget-cut depth keeps the ranker's best
            learned = (self.ranker.score(self._rank_features(g, rows, fused_scores, ents))
                       if self.ranker is not None else None)
            ce_order = rows if learned is None else [rows[i] for i in np.argsort(-learned, kind="stable")]
            if self.cross_encoder is not None and self.rerank_depth > 0:
                # Keep 30% of the budget for what follows and for a slow last batch, and plan
                # with 2x the running per-pair cost: a cross-encoder call cannot be interrupted,
                # so the controller must stop early rather than overrun (misses, not depth, matter).
                reserve = 0.30 * dl.budget_ms if not math.isinf(dl.budget_ms) else 0.0
                col = self.collection
                while depth < n:
                    room = dl.remaining_ms() - reserve
                    # batches of up to 4 pairs, smaller when only a few fit in the time left
                    est = 2.0 * max(self._ce_pair_ms.value, 1e-3)
                    batch = 8 if math.isinf(room) else min(4, int(room // est))
                    if batch < 1:
                        break
                    part = ce_order[depth:min(depth + batch, n)]
                    import time as _t

                    t0 = _t.perf_counter()
                    logits = self.cross_encoder.score(question, [(col.rows[r].title, col.rows[r].text)
                                                                 for r in part])
                    self._ce_pair_ms.update((_t.perf_counter() - t0) * 1000.0 / len(part))
                    for r, lg in zip(part, np.asarray(logits, dtype=np.float32).tolist()):
                        ce[r] = lg
                    depth += len(part)
            first = base if learned is None else learned
            signals = {}

            def heuristics(r: int) -> Tuple[float, float, float]:  # keyword, title, entity
                kw = self._lexrel(q_terms, r)
                title_toks = set(tokenize(self.collection.rows[r].title))
                tt = _term_match(q_terms, title_toks, self._alts) if q_terms else 0.0
                return kw, tt, (self._entity_match(ents, r) if ents else kw)

            for i, r in enumerate(rows):
                if r in ce and learned is not None:
                    # both model relevance: add their logits (bench/cross_encoder_probe.py)
                    p = min(max(float(learned[i]), 1e-9), 1.0 - 1e-9)
                    s = float(_sigmoid(np.float32(math.log(p / (1.0 - p)) + self.ranker_ce_weight * ce[r])))
                elif r in ce:
                    w = self.rerank_weights_ce
                    kw, tt, en = heuristics(r)
                    s = (w["rrf"] * first[i] + w["ce"] * float(_sigmoid(np.float32(ce[r]))) + w["keyword"] * kw
                         + w["title"] * tt + w["entity"] * en)
                elif self.cross_encoder is not None:
                    s = None  # beyond the depth reached: keeps its fused rank below the reranked ones
                elif learned is not None:
                    s = float(learned[i])
                else:
                    w = self.rerank_weights
                    kw, tt, en = heuristics(r)
                    s = w["rrf"] * base[i] + w["keyword"] * kw + w["title"] * tt + w["entity"] * en
                signals[r] = s
            reranked = [r for r in rows[:n] if signals.get(r) is not None]
            reranked.sort(key=lambda r: -signals[r])
            done = set(reranked)
            rest = [(i, r) for i, r in enumerate(rows) if r not in done]
            if learned is not None:  # (only with a cross-encoder: beyond its depth) the ranker's order
                rest.sort(key=lambda ir: -float(learned[ir[0]]))
            # scores of the rest stay below every reranked score and keep their (fused or ranker) order
            floor = min((signals[r] for r in reranked), default=1.0)
            order = reranked + [r for _, r in rest]
            scores = [signals[r] for r in reranked] + [floor * 0.5 * float(first[i]) for i, _ in rest]
        if self.cross_encoder is not None and self.ranker is not None:
            reason = (f"cross-encoder depth {depth} of {len(rows)} (budget) in the learned ranker's order, "
                      f"logits added (weight {self.ranker_ce_weight:g})")
        elif self.cross_encoder is not None:
            reason = f"cross-encoder depth {depth} of {len(rows)} (budget) + heuristics"
        elif self.ranker is not None:
            reason = f"learned ranker over {len(reranked)} candidates (no cross-encoder)"
        else:
            reason = f"heuristics over {len(reranked)} candidates (no cross-encoder)"
        stages.append(StageInfo("rerank", True, reason, dl.timings_ms.get("rerank", 0.0)))
        return order, scores, {r: signals[r] for r in reranked}, depth, ce

    def _entity_match(self, ents: Sequence[str], row: int) -> float:
        """Share of the question's entity-like tokens in the chunk (or, for an abbreviation, its expansion)."""
        r = self.collection.rows[row]
        raw = set(raw_tokens(r.title + " " + r.text))
        return sum(e in raw or any(a and a <= self._row_tokens(row) for a in self._alts.get(e, ()))
                   for e in ents) / len(ents)

    def _coverage(self, q_terms: Sequence[str], idf: np.ndarray, toks: Set[str]) -> float:
        """idf-weighted share of the question's terms in ``toks`` (abbreviations match their expansions)."""
        total = float(idf.sum())
        if total <= 0:
            return 0.0
        alts = self._alts
        return sum(w for t, w in zip(q_terms, idf) if t in toks or any(a and a <= toks for a in alts.get(t, ())))\
            / total

    def _rank_features(self, g: _Gathered, rows: Sequence[int], fused_scores: np.ndarray,
                       ents: Sequence[str]) -> np.ndarray:
        """The :data:`~medretrieve.rerank.FEATURES` of candidate ``rows`` (in fused order) [n, F]."""
        col = self.collection
        n = len(rows)
        rows_a = np.asarray(rows, dtype=np.int64)
        f: Dict[str, np.ndarray] = {}
        f["rrf"] = np.asarray(fused_scores, dtype=np.float64) / max(float(fused_scores[0]), 1e-12)
        f["log_rank"] = np.log1p(np.arange(n, dtype=np.float64))
        vecs = col.vectors(rows_a)
        dense = vecs @ g.qvecs[0] if g.qvecs is not None else np.zeros(n)
        f["dense"] = dense
        f["dense_gap"] = dense - dense.max()
        f["feedback"] = vecs @ g.fb_vec if g.fb_vec is not None else dense
        bm25 = g.question_bm25 if g.question_bm25 is not None else g.texts[0]
        bm = col.lexical.scores_for(bm25, rows_a).astype(np.float64)
        f["bm25"] = bm / max(float(bm.max()), 1e-12)
        q_terms = g.q_terms
        idf = col.lexical.idf(q_terms)
        f["coverage"] = np.array([self._coverage(q_terms, idf, self._row_tokens(r)) for r in rows])
        docs = [col.rows[r].document_id for r in rows]
        doc_cov: Dict[str, float] = {}
        doc_subject: Dict[str, float] = {}
        for d in set(docs):
            toks = self._doc_tokens(d)
            doc_cov[d] = self._coverage(q_terms, idf, toks)
            doc_subject[d] = _subject_share(g.subject, toks) if g.subject else doc_cov[d]
        f["doc_coverage"] = np.array([doc_cov[d] for d in docs])
        f["doc_subject"] = np.array([doc_subject[d] for d in docs])
        best_dense: Dict[str, float] = {}
        best_bm: Dict[str, float] = {}
        for d, x, b in zip(docs, f["dense"].tolist(), f["bm25"].tolist()):
            best_dense[d] = max(best_dense.get(d, -1.0), x)
            best_bm[d] = max(best_bm.get(d, 0.0), b)
        f["doc_dense"] = np.array([best_dense[d] for d in docs])
        f["doc_bm25"] = np.array([best_bm[d] for d in docs])
        head: Dict[str, int] = {}
        for d in docs[:30]:
            head[d] = head.get(d, 0) + 1
        f["doc_count"] = np.array([head.get(d, 0) for d in docs], dtype=np.float64)
        f["entity"] = (np.array([self._entity_match(ents, r) for r in rows]) if ents else f["coverage"])
        names = self.ranker.features if self.ranker is not None else FEATURES
        return np.column_stack([f[name] for name in names]) if n else np.zeros((0, len(names)))

    def fit_ranker(self, examples, l2: float = 1.0, progress: bool = False) -> LinearRanker:
        """Fit a :class:`~medretrieve.rerank.LinearRanker` on training questions and install it.

        ``examples``: a :class:`~medretrieve.expansion.TrainingMemory`, BioASQ golden files, or
        ``(question, relevant document ids)`` pairs. Each question is searched with this retriever
        (no deadline, no reranking) and every fused candidate becomes a row: positive when its document
        is relevant. Questions whose candidates hold no relevant document teach nothing and are skipped.
        Returns the ranker (also set as ``self.ranker``; save it with ``ranker.save(path)``).
        """
        pairs = training_pairs(examples)
        if not pairs:
            raise ValueError("fit_ranker needs at least one training question")
        saved, self.ranker = self.ranker, None
        X, y, used = [], [], 0
        try:
            from tqdm import tqdm

            for question, relevant in tqdm(pairs, desc="ranker features", disable=not progress):
                if not question.strip():
                    continue
                dl = Deadline(None)
                g = self._gather(question, 10, dl, None, lambda *a, **kw: None, expand=True, route=True,
                                 dense=True, lexical=True, feedback=True, ranked=True)
                rows = g.fused_ids.tolist()
                labels = [self.collection.rows[r].document_id in relevant for r in rows]
                if not any(labels):
                    continue
                X.append(self._rank_features(g, rows, g.fused_scores, _entities(question)))
                y.append(np.asarray(labels, dtype=np.float64))
                used += 1
        finally:
            self.ranker = saved
        if not X:
            raise ValueError("no training question has a relevant document among its candidates")
        self.ranker = LinearRanker.fit(np.vstack(X), np.concatenate(y), FEATURES, l2=l2,
                                       info={"questions": used, "skipped": len(pairs) - used})
        return self.ranker

    def _mmr(self, question, qtype, qvecs, order, scores, k, dl, enabled):
        if not enabled:
            return False, "disabled", order, {}
        if len(order) <= 1:
            return False, "fewer than 2 candidates", order, {}
        if dl.remaining_ms() < 0.05 * (dl.budget_ms if not math.isinf(dl.budget_ms) else 0.0) + 2.0:
            return False, f"budget: {dl.remaining_ms():.1f} ms left", order, {}
        from . import lambda_for, mmr

        # MMR reorders the best 2k candidates. Its relevance is the rerank score mapped linearly onto
        # the range of the query-chunk similarities of that pool, so relevance and the chunk-chunk
        # similarity share a scale and lambda means what it says; the rerank order is kept as the
        # relevance order.
        top_score = float(scores[0]) if scores else 0.0
        pool = [r for r, sc_ in zip(order[: 2 * k], scores[: 2 * k]) if sc_ >= self.mmr_floor * top_score]
        if len(pool) < 2:
            return False, f"fewer than 2 candidates within {self.mmr_floor:.2f} of the best score", order, {}
        vecs = self.collection.vectors(pool)
        if qvecs is not None:
            qsim = vecs @ qvecs[0]
            lo, hi = float(qsim.min()), float(qsim.max())
        else:
            lo, hi = 0.0, 1.0
        sc = np.asarray(scores[: len(pool)], dtype=np.float64)
        span = float(sc.max() - sc.min())
        rel = (lo + (sc - sc.min()) / span * (hi - lo)) if span > 0 else np.full(len(pool), hi)
        rel = rel.astype(np.float32)
        lam = float(lambda_for(qtype))
        pos, mscores = mmr(None, vecs, k=len(pool), lambda_=lam, relevance=rel)
        pos = np.asarray(pos, dtype=np.int64).tolist()
        picked = [pool[p] for p in pos]
        done = set(picked)
        rest = [r for r in order if r not in done]
        return True, f"lambda={lam:.2f} over the {len(pool)} candidates within {self.mmr_floor:.2f} of the best", picked + rest, dict(
            zip(picked, np.asarray(mscores, dtype=np.float32).tolist()))

    def _select(self, rows: Sequence[int], k: int, per_document: Optional[int]) -> List[int]:
        out: List[int] = []
        seen: List[Set[str]] = []
        per_doc: Dict[str, int] = {}
        for r in rows:
            doc = self.collection.rows[r].document_id
            if per_document is not None and per_doc.get(doc, 0) >= per_document:
                continue
            toks = self._row_tokens(r)
            if any(_jaccard(toks, s) >= self.near_duplicate for s in seen):
                continue
            out.append(r)
            seen.append(toks)
            per_doc[doc] = per_doc.get(doc, 0) + 1
            if len(out) >= k:
                break
        return out

    def _weak_reasons(self, q_terms: Sequence[str], top: Sequence[int], k: int) -> List[str]:
        reasons = []
        if not top:
            return ["no hits"]
        head = top[:5]
        lexrel = float(np.mean([self._lexrel(q_terms, r) for r in head]))
        if lexrel < self.weak_threshold:
            reasons.append(f"low lexical relevance {lexrel:.2f} < {self.weak_threshold}")
        docs = {self.collection.rows[r].document_id for r in top}
        need = min(self.min_articles, self.collection.n_documents, k)
        if len(docs) < need:
            reasons.append(f"few articles: {len(docs)} < {need}")
        if len(head) >= 2:
            sims = [_jaccard(self._row_tokens(a), self._row_tokens(b))
                    for i, a in enumerate(head) for b in head[i + 1:]]
            red = float(np.mean(sims))
            if red > self.redundancy_threshold:
                reasons.append(f"redundant: mean Jaccard {red:.2f} > {self.redundancy_threshold}")
        return reasons

    def _recover(self, question, qtype, intent, q_terms, top, k, used_variants, dl, per_document, subject=()):
        """Extra expansions; replace only weak hits, and only with better ones."""
        extra, terms, note = self._variants(question, qtype, intent, dl,
                                            ("training", "abbreviations", "relations", "llm"),
                                            n_terms=15, n_neighbours=6)
        # the abbreviation expansion is already part of the question's own text
        texts = [t for name, t in extra.items() if name != "abbreviations" and t not in used_variants.values()]
        # relaxed lexical queries: each content term pair, so partial matches surface
        texts.append(" ".join(q_terms))
        col = self.collection
        lists = []
        allowed = col.alive
        for t in texts:
            ids, _ = col.lexical.search(t, k=self.candidates, allowed=allowed)
            lists.append(ids)
        if col.alive.any() and dl.remaining_ms() > 2 * self._encode_ms.value + 10:
            qv = col.encode_queries([texts[0]])
            ids, _ = col.dense.search(qv, k=min(self.candidates, len(col)), ef=max(self.ef_max, self.candidates))
            ids = np.asarray(ids, dtype=np.int64).reshape(-1)
            ids = ids[ids >= 0]
            lists.append(ids[col.alive[ids]])
        from . import rrf

        cand, _ = rrf(lists, k=self.rrf_k, top_n=self.candidates) if lists else (np.zeros(0, np.int64), None)
        in_top = set(top)
        cand = [r for r in np.asarray(cand, dtype=np.int64).tolist() if r not in in_top]
        cand_rel = sorted(((self._lexrel(q_terms, r), r) for r in cand), key=lambda x: -x[0])
        rows = self.collection.rows
        new_top = list(top)
        replaced = 0
        added: List[int] = []
        few_articles = len({rows[r].document_id for r in top}) < min(self.min_articles, k)
        # replaceable: hits below the relevance threshold (weakest first), then, when the hits come
        # from too few articles, repeated hits of one article (last first). Good hits are kept.
        rel_now = {r: self._lexrel(q_terms, r) for r in new_top}
        # only the lower half of the list is open to replacement: the top hits are the
        # retrievers' strongest agreement and are never displaced
        half = max(1, len(new_top) // 2)
        low = sorted((i for i, r in enumerate(new_top) if i >= half and rel_now[r] < self.weak_threshold),
                     key=lambda i: rel_now[new_top[i]])
        repeats: List[int] = []
        if few_articles:
            first_of: Dict[str, int] = {}
            for i, r in enumerate(new_top):
                first_of.setdefault(rows[r].document_id, i)
            repeats = [i for i in reversed(range(half, len(new_top)))
                       if first_of[rows[new_top[i]].document_id] != i and i not in low]
        used: Set[int] = set(new_top)
        # nor may a replacement cover less of the question's subject (drug, gene) than the hit it replaces
        doc_subject: Dict[str, float] = {}

        def subject_of(row: int) -> float:
            d = rows[row].document_id
            if d not in doc_subject:
                doc_subject[d] = _subject_share(subject, self._doc_tokens(d)) if subject else 0.0
            return doc_subject[d]

        for i in low + repeats:
            old = new_top[i]
            need_new_doc = i in repeats
            docs_now = {rows[r].document_id for r in new_top}
            old_subject = subject_of(old)
            for rel, r in cand_rel:
                if r in used or any(_jaccard(self._row_tokens(r), self._row_tokens(o)) >= self.near_duplicate
                                    for o in new_top):
                    continue
                if subject_of(r) < old_subject:
                    continue
                if need_new_doc:
                    ok = rows[r].document_id not in docs_now and rel >= rel_now[old]
                else:  # a replacement must itself pass the threshold
                    ok = rel >= self.weak_threshold and rel > rel_now[old]
                if ok:
                    new_top[i] = r
                    used.add(r)
                    added.append(r)
                    replaced += 1
                    break
        for rel, r in cand_rel:  # fill up when the first pass returned fewer than k
            if len(new_top) >= k:
                break
            if r not in used:
                new_top.append(r)
                used.add(r)
                added.append(r)
                replaced += 1
        note = (f"{len(texts)} recovery queries ({', '.join(terms) or 'relaxed terms only'}); "
                f"{replaced} weak hits replaced")
        lex_before = float(np.mean([self._lexrel(q_terms, r) for r in top[:5]])) if top else 0.0
        lex_after = float(np.mean([self._lexrel(q_terms, r) for r in new_top[:5]])) if new_top else 0.0
        return new_top, {"replaced": replaced, "note": note, "terms": terms, "added_rows": set(added),
                         "lexical_relevance_before": lex_before, "lexical_relevance_after": lex_after}


# ----------------------------------------------------------------- CLI


def add_cli(sub) -> None:
    p = sub.add_parser("search", help="search a collection")
    p.add_argument("collection", help="collection directory (medretrieve build)")
    p.add_argument("question")
    p.add_argument("--k", type=int, default=10)
    p.add_argument("--deadline-ms", type=float, default=300.0)
    p.add_argument("--cross-encoder", default=None, help="cross-encoder model directory")
    p.add_argument("--training", nargs="*", default=None, help="BioASQ golden files for training memory")
    p.add_argument("--ranker", default=None, help="learned ranker JSON (medretrieve fit-ranker)")
    p.add_argument("--query-encoder", default=None,
                   help="query encoder directory replacing the collection's (medretrieve fit-query-encoder)")
    p.add_argument("--json", action="store_true", help="print the whole result as JSON")
    p.set_defaults(func=_cli_search)


def format_result(res: SearchResult, width: int = 160) -> str:
    lines = [f"Q: {res.question}", f"   type={res.query_type} intent={res.intent} weak={res.weak}"
             + (f" ({'; '.join(res.weak_reasons)})" if res.weak else "") + f" recovered={res.recovered}"
             + f" total={res.timings_ms.get('total', 0):.1f} ms"]
    for i, h in enumerate(res.hits, 1):
        text = " ".join(h.text.split())
        lines.append(f"{i:3d}. [{h.score:.3f}] {h.document_id} {h.section or '-'} | {h.title[:60]}")
        lines.append(f"      {text[:width]}{'...' if len(text) > width else ''}")
    lines.append("   stages: " + ", ".join(
        f"{s.name}{'' if s.ran else '(skipped)'} {s.elapsed_ms:.1f}ms" for s in res.stages))
    return "\n".join(lines)


def _cli_search(args: argparse.Namespace) -> int:
    from .collection import Collection

    try:
        col = Collection.open(args.collection, query_encoder=args.query_encoder)
        ret = Retriever(col, cross_encoder=args.cross_encoder, training=args.training, ranker=args.ranker)
        res = ret.search(args.question, k=args.k, deadline_ms=args.deadline_ms)
    except (ValueError, FileNotFoundError, TypeError) as exc:
        print(f"medretrieve search: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(res.to_dict(), indent=2, default=str))
    else:
        print(format_result(res))
    return 0
