"""Reranking the fused candidates: a learned ranker, a cross-encoder, or the heuristic formula.

- With a learned ranker (:class:`~.learned_ranker.LinearRanker`) the score is its probability of relevance over the
  :data:`~.learned_ranker.FEATURES` that :meth:`Reranker.features` computes.
- Otherwise ``score = w_rrf rrf + w_keyword keyword + w_title title + w_entity entity`` (+ ``w_ce ce`` with a
  cross-encoder; weights in ``settings.DEFAULT_RERANK_WEIGHTS`` / ``_CE``); ``ce`` = sigmoid of the logit, ``rrf``
  normalised by the best; ``keyword`` / ``title`` = share of the question's content terms in the chunk / its
  title; ``entity`` = share of the question's entity-like words in the chunk, or ``keyword`` when it has none.
- With a cross-encoder and a learned ranker, the cross-encoder reads the candidates in the ranker's order and a
  scored candidate gets ``sigmoid(logit(p_ranker) + ranker_ce_weight x ce_logit)``: both are relevance models,
  and adding logits kept their combined gain where the fixed formula lost it.

A cross-encoder call cannot be interrupted, so it runs in small batches while the budget allows, planned with
2x the running per-pair cost, keeping 30% of the budget for what follows; the depth reached is reported.
Candidates beyond that depth keep their fused (or ranker) order below the reranked ones.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..outbound import Deadline
from .budget import CostModel
from .candidates import Candidates
from .matching import coverage, subject_share
from .query import Query
from .learned_ranker import FEATURES, LinearRanker
from .results import StageLog
from .scope import SearchScope
from .settings import Settings

_CE_RESERVE = 0.30  # share of the budget a cross-encoder leaves for what follows


def _sigmoid(x: float) -> float:
    return 1.0 / (1.0 + math.exp(-min(max(x, -30.0), 30.0)))


@dataclass
class Ranking:
    """Candidates in reranked order with their scores (``scores[i]`` is ``order[i]``'s)."""

    order: List[int]
    scores: List[float]
    rerank: Dict[int, float]  # row -> rerank score, for the candidates the stage scored
    depth: int  # cross-encoder pairs scored
    cross_encoder: Dict[int, float]  # row -> cross-encoder logit


class Reranker:
    """The rerank stage (see the module docstring): built once per retriever, each call reads the
    :class:`~.scope.SearchScope` it is given."""

    def __init__(self, settings: Settings, costs: CostModel, ranker: Optional[LinearRanker] = None,
                 cross_encoder=None, ranker_note: str = "") -> None:
        self.settings = settings
        self.costs = costs
        self.ranker = ranker
        self.ranker_note = ranker_note  # which learned ranker and why (the default's choice), for the stage reason
        self.cross_encoder = cross_encoder

    def skip(self, cands: Candidates, log: StageLog, reason: str, cut: bool = False) -> Ranking:
        """The fused order, scores normalised by the best (what a search without reranking returns)."""
        scores = cands.fused_scores.astype(np.float64)
        if len(scores):
            scores /= max(float(scores[0]), 1e-12)
        log.record("rerank", False, reason, cut)
        return Ranking(cands.fused_ids.tolist(), scores.tolist(), {}, 0, {})

    def rerank(self, scope: SearchScope, query: Query, cands: Candidates, dl: Deadline, log: StageLog,
               enabled: bool = True) -> Ranking:
        if not enabled:
            return self.skip(cands, log, "disabled")
        if not len(cands.fused_ids):
            return self.skip(cands, log, "no candidates")
        if dl.expired():
            return self.skip(cands, log, f"budget: deadline passed ({dl.remaining_ms():.1f} ms)", cut=True)
        rows = cands.fused_ids.tolist()
        base = cands.fused_scores / max(float(cands.fused_scores[0]), 1e-12)
        with dl.stage("rerank"):
            n = min(len(rows), max(self.settings.rerank_depth, 1)) if self.cross_encoder is not None else len(rows)
            # the learned ranker's probability stands in for the fused rank (and, without a cross-encoder, for
            # the whole heuristic formula); with both, the cross-encoder reads the candidates in the ranker's
            # order, so a budget-cut depth keeps the ranker's best
            learned = self.ranker.score(self.features(scope, query, cands, rows)) if self.ranker is not None else None
            ce_order = rows if learned is None else [rows[i] for i in np.argsort(-learned, kind="stable")]
            use_ce = self.cross_encoder is not None and self.settings.rerank_depth > 0
            ce = self._cross_encode(scope, query, ce_order[:n], dl) if use_ce else {}
            first = base if learned is None else learned
            signals: Dict[int, float] = {}
            for i, r in enumerate(rows):  # every row: the cross-encoder's depth runs in the ranker's order
                s = self._signal(scope, query, r, i, base, learned, ce)
                if s is not None:  # None: beyond the cross-encoder's depth
                    signals[r] = s
            reranked = sorted(signals, key=lambda r: -signals[r])
            done = set(reranked)
            rest = [(i, r) for i, r in enumerate(rows) if r not in done]
            if learned is not None:  # (only with a cross-encoder: beyond its depth) the ranker's order
                rest.sort(key=lambda ir: -float(learned[ir[0]]))
            # scores of the rest stay below every reranked score and keep their (fused or ranker) order
            floor = min((signals[r] for r in reranked), default=1.0)
            order = reranked + [r for _, r in rest]
            scores = [signals[r] for r in reranked] + [floor * 0.5 * float(first[i]) for i, _ in rest]
        log.record("rerank", True, self._describe(len(ce), len(rows), len(reranked)), cut=use_ce and len(ce) < n)
        return Ranking(order, scores, {r: signals[r] for r in reranked}, len(ce), ce)

    def _describe(self, depth: int, n_rows: int, n_reranked: int) -> str:
        which = f"learned ranker ({self.ranker_note})" if self.ranker_note else "learned ranker"
        if self.cross_encoder is not None and self.ranker is not None:
            return (f"cross-encoder depth {depth} of {n_rows} (budget) in the {which}'s order, "
                    f"logits added (weight {self.settings.ranker_ce_weight:g})")
        if self.cross_encoder is not None:
            return f"cross-encoder depth {depth} of {n_rows} (budget) + heuristics"
        if self.ranker is not None:
            return f"{which} over {n_reranked} candidates (no cross-encoder)"
        return f"heuristics over {n_reranked} candidates (no cross-encoder)"

    def _signal(self, scope: SearchScope, query: Query, r: int, i: int, base: np.ndarray,
                learned: Optional[np.ndarray], ce: Dict[int, float]) -> Optional[float]:
        """The rerank score of candidate ``r`` (fused position ``i``); None beyond the cross-encoder's depth."""
        s = self.settings
        if r in ce and learned is not None:
            # both model relevance: add their logits
            p = min(max(float(learned[i]), 1e-9), 1.0 - 1e-9)
            return _sigmoid(math.log(p / (1.0 - p)) + s.ranker_ce_weight * ce[r])
        if r in ce:
            w = s.rerank_weights_ce
            kw, tt, en = self._heuristics(scope, query, r)
            return (w["rrf"] * float(base[i]) + w["ce"] * _sigmoid(ce[r]) + w["keyword"] * kw + w["title"] * tt
                    + w["entity"] * en)
        if self.cross_encoder is not None:
            return None
        if learned is not None:
            return float(learned[i])
        w = s.rerank_weights
        kw, tt, en = self._heuristics(scope, query, r)
        return w["rrf"] * float(base[i]) + w["keyword"] * kw + w["title"] * tt + w["entity"] * en

    @staticmethod
    def _heuristics(scope: SearchScope, query: Query, r: int) -> tuple:
        """keyword, title and entity match of candidate ``r``."""
        tokens = scope.tokens
        kw = tokens.lexical_relevance(query, r)
        tt = tokens.title_match(query, r) if query.terms else 0.0
        return kw, tt, (tokens.entity_match(query, r) if query.entities else kw)

    def _cross_encode(self, scope: SearchScope, query: Query, rows: Sequence[int], dl: Deadline
                      ) -> Dict[int, float]:
        """Cross-encoder logits of ``rows`` in order, in batches while the budget allows."""
        col = scope.collection
        reserve = dl.share_ms(_CE_RESERVE)
        out: Dict[int, float] = {}
        depth = 0
        while depth < len(rows):
            room = dl.remaining_ms() - reserve
            # batches of up to 4 pairs, smaller when only a few fit in the time left
            est = 2.0 * max(self.costs.ce_pair_ms.value, 1e-3)
            batch = 8 if math.isinf(room) else min(4, int(room // est))
            if batch < 1:
                break
            part = rows[depth:depth + batch]
            t0 = time.perf_counter()
            logits = self.cross_encoder.score(query.text, [(col.rows[r].title, col.rows[r].text) for r in part])
            self.costs.ce_pair_ms.update((time.perf_counter() - t0) * 1000.0 / len(part))
            for r, lg in zip(part, np.asarray(logits, dtype=np.float32).tolist()):
                out[r] = lg
            depth += len(part)
        return out

    # ------------------------------------------------------------- ranker features
    def features(self, scope: SearchScope, query: Query, cands: Candidates, rows: Sequence[int],
                 names: Optional[Sequence[str]] = None) -> np.ndarray:
        """The ranker features ``names`` (default: the installed ranker's, else all of :data:`FEATURES`) of
        candidate ``rows`` (in fused order, rows of ``scope``'s collection) [n, F]."""
        col, tokens = scope.collection, scope.tokens
        if names is None:
            names = self.ranker.features if self.ranker is not None else FEATURES
        n = len(rows)
        if not n:
            return np.zeros((0, len(names)))
        f: Dict[str, np.ndarray] = {}
        f["rrf"] = np.asarray(cands.fused_scores, dtype=np.float64) / max(float(cands.fused_scores[0]), 1e-12)
        f["log_rank"] = np.log1p(np.arange(n, dtype=np.float64))
        vecs = col.vectors(rows)
        dense = vecs @ cands.vectors[0] if cands.vectors is not None else np.zeros(n)
        f["dense"] = dense
        f["dense_gap"] = dense - dense.max()
        f["feedback"] = vecs @ cands.feedback_vector if cands.feedback_vector is not None else dense
        bm25 = cands.question_bm25 if cands.question_bm25 is not None else cands.bm25_query
        bm = col.lexical.scores_for(bm25, rows).astype(np.float64)
        f["bm25"] = bm / max(float(bm.max()), 1e-12)
        idf = col.lexical.idf(list(query.terms))
        f["coverage"] = np.array([coverage(query, idf, tokens.of_row(r)) for r in rows])
        docs = [col.rows[r].document_id for r in rows]
        doc_cov: Dict[str, float] = {}
        doc_subject: Dict[str, float] = {}
        for d in set(docs):
            toks = tokens.of_document(d)
            doc_cov[d] = coverage(query, idf, toks)
            doc_subject[d] = subject_share(query.subject, toks) if query.subject else doc_cov[d]
        f["doc_coverage"] = np.array([doc_cov[d] for d in docs])
        f["doc_subject"] = np.array([doc_subject[d] for d in docs])
        best_dense: Dict[str, float] = {}
        best_bm: Dict[str, float] = {}
        for d, x, b in zip(docs, f["dense"].tolist(), f["bm25"].tolist()):
            best_dense[d] = max(best_dense.get(d, -np.inf), x)  # raw inner products can be below -1
            best_bm[d] = max(best_bm.get(d, 0.0), b)
        f["doc_dense"] = np.array([best_dense[d] for d in docs])
        f["doc_bm25"] = np.array([best_bm[d] for d in docs])
        head: Dict[str, int] = {}
        for d in docs[:30]:
            head[d] = head.get(d, 0) + 1
        f["doc_count"] = np.array([head.get(d, 0) for d in docs], dtype=np.float64)
        f["entity"] = (np.array([tokens.entity_match(query, r) for r in rows]) if query.entities
                       else f["coverage"])
        for name in ("dense", "feedback", "doc_dense"):  # the encoder-independent views (ranker.PORTABLE_FEATURES)
            f[f"{name}_rank"] = _log_rank(f[name])
        return np.column_stack([f[name] for name in names])


def _log_rank(values: np.ndarray) -> np.ndarray:
    """log(1 + rank) of each value among ``values``, the largest ranked 0 (ties keep their order)."""
    rank = np.empty(len(values), dtype=np.float64)
    rank[np.argsort(-values, kind="stable")] = np.arange(len(values), dtype=np.float64)
    return np.log1p(rank)
