"""Tuning of a :class:`~medretrieve.retrieval.retriever.Retriever`, checked once at construction.

Every value is validated here, so a bad one fails with a ``ValueError`` naming it rather than showing up as odd
results (NaN rerank weights gave NaN scores before these checks).

Which stages run by default, and why. The pipeline was tuned on BioASQ 7b; a stage stays on by default only if it
does not lose document MAP@10 on another year: the BioASQ 12b closed corpus, searched with a learned ranker
fitted on 7b only (``python bench/retrieval.py quality --train 7B --test 12B``; the reverse direction too; tables
in bench/RESULTS.md, "Cross-year quality"). Each switch is kept (``Retriever(..., name=value)`` or
``search(..., switch=...)``). Shares below: document MAP@10 on 12b (ranker fitted on 7b) / on 7b (fitted on 12b).

- on: the learned ranker (the shipped default, ``retrieval.shipped_ranker``; +0.022 / +0.007 over the fused
  order), dense + BM25 fusion, section routing (a no-op without section labels: 0.000 / 0.000) and near-duplicate
  removal (+0.006 / -0.003: kept, since a prompt gains nothing from the same sentence twice and the 12b criterion
  holds);
- ``recovery``: None, the default, runs it (for weak questions only) only with an online source, whose re-query
  can bring new articles. Over a local collection it changed no question's ranking on either year (0.000 / 0.000)
  and cost 62 / 65 ms at p50 on the questions it ran for (bench/weak.py; RESULTS "Weak questions"), so it is off
  there; ``recovery=True`` (or ``search(recovery=True)``) turns it on.
- ``expansions``: the static abbreviation and relation tables are **off** (-0.002 / +0.002; on the held-out
  corpus of issue 17 they cost 0.004). An abbreviation in the question still matches its long form in the rerank
  features (``Query.alternatives``); training memory and LLM synonyms run whenever a training set / a term source
  is given. Turn the tables on with ``expansions=("abbreviations", "relations", "training", "llm")``.
- ``feedback`` (pseudo-relevance feedback): None, the default, runs it only **without** a learned ranker. Without
  one it helps in both years; with one it is mixed (-0.003 / +0.003), so the rule puts it off where it loses.
- ``mmr``: MMR diversification is **off** (-0.001 / -0.001; no run showed a gain in document MAP). Turn it on
  (``mmr=True`` or ``search(mmr=True)``) when a prompt needs evidence from different angles more than the
  best-ranked evidence.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Dict, Optional, Tuple

import numpy as np

# Rerank formula weights. Without a cross-encoder they were chosen by a grid search on the BioASQ 7B1+7B2
# questions: keyword and title overlap did not help there on top of the fused rank, entity alignment a little.
# With a cross-encoder: an even split between the fused rank and the cross-encoder plus small heuristic terms.
DEFAULT_RERANK_WEIGHTS: Dict[str, float] = {"rrf": 1.0, "keyword": 0.0, "title": 0.0, "entity": 0.05}
DEFAULT_RERANK_WEIGHTS_CE: Dict[str, float] = {"rrf": 0.45, "ce": 0.45, "keyword": 0.03, "title": 0.02,
                                               "entity": 0.05}

# expansion kinds (retrieval.expansion) the expand stage runs; "training" and "llm" only run when a training memory
# / an LLM term source is given. The static tables are off by default: see the Settings docstring.
EXPANSION_KINDS: Tuple[str, ...] = ("abbreviations", "relations", "training", "llm")
DEFAULT_EXPANSIONS: Tuple[str, ...] = ("training", "llm")

# setting -> (integer only, lowest, highest); None: unbounded on that side
_RANGES: Dict[str, Tuple[bool, Optional[float], Optional[float]]] = {
    "candidates": (True, 1, None), "rrf_k": (False, 0.0, None), "variant_weight": (False, 0.0, None),
    "ef_base": (True, 1, None), "ef_min": (True, 1, None), "ef_max": (True, 1, None),
    "ef_time_ms": (False, 0.0, None),
    "rerank_depth": (True, 0, None), "weak_threshold": (False, 0.0, 1.0), "subject_threshold": (False, 0.0, 1.0),
    "weak_depth": (True, 1, None), "min_articles": (True, 0, None), "near_duplicate": (False, 0.0, None),
    "llm_min_ms": (False, 0.0, None), "mmr_floor": (False, 0.0, 1.0), "feedback_weight": (False, 0.0, None),
    "feedback_docs": (True, 1, None), "per_question": (True, 1, None), "per_document": (True, 1, None),
    "ranker_ce_weight": (False, 0.0, None),
}


def is_number(value: Any, integer: bool = False) -> bool:
    """A finite int or float (an int when ``integer``); bools are not numbers here."""
    kind = (int, np.integer) if integer else (int, float, np.integer, np.floating)
    return not isinstance(value, bool) and isinstance(value, kind) and math.isfinite(value)


def check_settings(**values: Any) -> None:
    """ValueError naming the first setting that is not a finite number in its range."""
    for name, value in values.items():
        integer, lo, hi = _RANGES[name]
        if not is_number(value, integer) or (lo is not None and value < lo) or (hi is not None and value > hi):
            what = "an integer" if integer else "a finite number"
            bounds = f" >= {lo}" if hi is None else f" in [{lo}, {hi}]"
            raise ValueError(f"{name} must be {what}{bounds}, got {value!r}")
    if values.get("ef_time_ms") == 0:
        raise ValueError("ef_time_ms must be > 0 (the time left at which ef reaches its ceiling)")
    if values.get("near_duplicate") == 0:
        raise ValueError("near_duplicate must be > 0 (a Jaccard of 0 would drop every hit after the first)")
    if "ef_min" in values and values["ef_min"] > values["ef_max"]:
        raise ValueError(f"ef_min ({values['ef_min']}) must not exceed ef_max ({values['ef_max']})")


def _check_weights(name: str, weights: Dict[str, float], defaults: Dict[str, float]) -> None:
    unknown = sorted(set(weights) - set(defaults))
    if unknown:
        raise ValueError(f"{name}: unknown weights {unknown}; known: {sorted(defaults)}")
    for key, w in weights.items():
        if not is_number(w) or w < 0:
            raise ValueError(f"{name}[{key!r}] must be a finite number >= 0, got {w!r}")


@dataclass(frozen=True)
class Settings:
    """Retriever tuning (keyword arguments of ``Retriever``; each checked in ``__post_init__``).

    - ``candidates`` (>= 1): fused candidates kept for reranking; ``rrf_k`` (>= 0): the RRF constant;
      ``variant_weight`` (>= 0): RRF weight of an expansion's list, the question's own lists weigh 1.
    - ``ef_base`` / ``ef_min`` / ``ef_max`` (1 <= ef_min <= ef_max; the production seed's 40-400) and
      ``ef_time_ms`` (> 0): HNSW ef from the query type and the time left. The type's floor, ``ef_base`` x its
      importance, is what the question's own lists are searched at, and only they feed the weak flag, so the flag
      does not move with machine load; the candidates are searched again at an ef that rises from the floor to
      the type's ceiling (``ef_max`` for list questions, less for the narrower types) as the time left after the
      reserve for later stages grows to ``ef_time_ms``, and at the ceiling without a deadline
      (``CandidateGenerator.ef_for``). An ef never goes below the candidates asked for (``candidates``).
    - ``rerank_depth`` (>= 0): most pairs a cross-encoder scores; ``rerank_weights`` / ``rerank_weights_ce``:
      overrides of the formula's weights (keys of ``DEFAULT_RERANK_WEIGHTS`` / ``_CE``, finite, >= 0).
    - The weak check reads the best evidence only, the first ``weak_depth`` (>= 1) hits of the question's own
      search: it is weak when none of them holds ``weak_threshold`` (0-1) of the question's content terms, or
      (a question with subject words) ``subject_threshold`` (0-1) of its subject words (``retrieval.recovery``;
      tuned on BioASQ 7b, bench/weak.py). ``min_articles`` (>= 0): recovery may replace repeats of one article
      when the hits come from fewer documents than this.
    - ``near_duplicate`` (> 0): a hit whose token Jaccard with an earlier hit reaches it is dropped; above 1
      nothing is dropped. It also drops another document's copy of a sentence, which costs a little document
      MAP on BioASQ; it keeps prompts free of repeats.
    - ``llm_min_ms`` (>= 0): time that must be left for LLM synonyms to be asked for; ``mmr_floor`` (0-1):
      MMR reorders only candidates scoring at least this share of the best.
    - ``feedback_weight`` (>= 0) / ``feedback_docs`` (>= 1): pseudo-relevance feedback, the mean vector of
      the top ``feedback_docs`` fused chunks added with this weight.
    - ``subject_boost`` (None or >= 0): the question's subject words count ``1 + subject_boost`` times in its
      BM25 query; 0 gives plain BM25. Why: in a collection gathered around a topic the subject of a question is
      common and its idf low, so plain BM25 lets "mechanism" + "action" outweigh "motolimod". None boosts once
      without a learned ranker and not at all with one, whose ``doc_subject`` feature weighs that evidence.
    - ``ranker_ce_weight`` (>= 0): with a cross-encoder and a learned ranker, the weight of the cross-encoder's
      logit added to the ranker's.
    - ``expansions``: the expansion kinds the expand stage may use, of :data:`EXPANSION_KINDS` (default
      ``("training", "llm")``: the static tables off, see the module docstring).
    - ``feedback`` (None / True / False): pseudo-relevance feedback; None runs it only without a learned ranker.
    - ``mmr`` (bool, default False): MMR diversification of the hits.
    - ``recovery`` (None / True / False): recovery of weak questions; None runs it only with an online source
      (module docstring).
    """

    candidates: int = 100
    rrf_k: float = 60.0
    variant_weight: float = 0.5
    ef_base: int = 64
    ef_min: int = 40
    ef_max: int = 400
    ef_time_ms: float = 200.0
    rerank_depth: int = 50
    weak_threshold: float = 0.3
    subject_threshold: float = 0.34
    weak_depth: int = 1
    min_articles: int = 3
    near_duplicate: float = 0.8
    llm_min_ms: float = 150.0
    mmr_floor: float = 0.95
    feedback_weight: float = 1.0
    feedback_docs: int = 3
    subject_boost: Optional[int] = None
    ranker_ce_weight: float = 0.5
    expansions: Tuple[str, ...] = DEFAULT_EXPANSIONS
    feedback: Optional[bool] = None
    mmr: bool = False
    recovery: Optional[bool] = None
    rerank_weights: Dict[str, float] = field(default_factory=dict)
    rerank_weights_ce: Dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_settings(**{f.name: getattr(self, f.name) for f in fields(self) if f.name in _RANGES})
        for name in ("feedback", "mmr", "recovery"):
            v = getattr(self, name)
            if not (isinstance(v, bool) or (v is None and name != "mmr")):
                raise ValueError(f"{name} must be {'' if name == 'mmr' else 'None, '}True or False, got {v!r}")
        kinds = self.expansions
        if isinstance(kinds, str) or not all(isinstance(x, str) for x in kinds) or set(kinds) - set(EXPANSION_KINDS):
            raise ValueError(f"expansions must be a sequence of {list(EXPANSION_KINDS)}, got {kinds!r}")
        object.__setattr__(self, "expansions", tuple(dict.fromkeys(kinds)))
        sb = self.subject_boost
        if sb is not None and (not isinstance(sb, (int, np.integer)) or isinstance(sb, bool) or sb < 0):
            raise ValueError(f"subject_boost must be None or a non-negative integer, got {sb!r}")
        for name, defaults in (("rerank_weights", DEFAULT_RERANK_WEIGHTS),
                               ("rerank_weights_ce", DEFAULT_RERANK_WEIGHTS_CE)):
            given = getattr(self, name)
            if given is None:
                given = {}
            if not isinstance(given, dict):
                raise ValueError(f"{name} must be a dict of weights, got {type(given).__name__}")
            _check_weights(name, given, defaults)
            object.__setattr__(self, name, {**defaults, **given})

    @classmethod
    def names(cls) -> Tuple[str, ...]:
        return tuple(f.name for f in fields(cls))
