"""Diversification: MMR over the best reranked candidates, with the query type's lambda.

MMR reorders only the best ``2k`` candidates scoring within ``mmr_floor`` (0.95) of the best: over all
candidates it lost much of the ranking quality on BioASQ, where near-duplicate evidence is still relevant. Its
relevance is the rerank score mapped linearly onto the range of the query-chunk similarities of those contenders,
so relevance and the chunk-chunk similarity share a scale and lambda means what it says; the rerank order is
kept as the relevance order. Similarities are cosines in both geometries: with raw inner-product vectors (MedCPT)
the contenders and the question vector are normalised first, since the chunk-chunk inner products of two
towers' vectors do not share a scale with the query-chunk ones. Skipped when less than 5% of the budget (+2 ms) is left.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List, Optional

import numpy as np

from ..fusion import lambda_for, mmr
from ..outbound import Deadline
from .collection_view import CollectionView
from .query import Query
from .rerank import Ranking
from .settings import Settings


@dataclass
class Diversified:
    """The candidates after MMR: ``order`` (all of them), ``scores`` (row -> MMR score of the reordered ones)."""

    ran: bool
    note: str
    order: List[int]
    scores: Dict[int, float] = field(default_factory=dict)
    cut: bool = False  # skipped because the deadline was near


def diversify(collection: CollectionView, settings: Settings, query: Query, qvec: Optional[np.ndarray],
              ranking: Ranking, k: int, dl: Deadline) -> Diversified:
    """MMR over the best of the reranked candidates (see the module docstring); ``qvec``: the encoded query texts
    (row 0 the question's; None when dense retrieval was off)."""
    order, scores = ranking.order, ranking.scores
    if len(order) <= 1:
        return Diversified(False, "fewer than 2 candidates", order)
    if dl.remaining_ms() < dl.share_ms(0.05) + 2.0:
        return Diversified(False, f"budget: {dl.remaining_ms():.1f} ms left", order, cut=True)
    top_score = float(scores[0]) if scores else 0.0
    contenders = [r for r, sc in zip(order[: 2 * k], scores[: 2 * k]) if sc >= settings.mmr_floor * top_score]
    if len(contenders) < 2:
        return Diversified(False, f"fewer than 2 candidates within {settings.mmr_floor:.2f} of the best score", order)
    vecs = collection.vectors(contenders)
    qvec = qvec[0] if qvec is not None else None
    if not collection.normalized:  # raw inner products: compare directions, as in the unit-length geometry
        vecs = vecs / np.maximum(np.linalg.norm(vecs, axis=1, keepdims=True), 1e-12)
        qvec = None if qvec is None else qvec / max(float(np.linalg.norm(qvec)), 1e-12)
    if qvec is not None:
        qsim = vecs @ qvec
        lo, hi = float(qsim.min()), float(qsim.max())
    else:
        lo, hi = 0.0, 1.0
    sc = np.asarray(scores[: len(contenders)], dtype=np.float64)
    span = float(sc.max() - sc.min())
    rel = (lo + (sc - sc.min()) / span * (hi - lo)) if span > 0 else np.full(len(contenders), hi)
    lam = float(lambda_for(query.qtype))
    pos, mscores = mmr(None, vecs, k=len(contenders), lambda_=lam, relevance=rel.astype(np.float32))
    picked = [contenders[p] for p in np.asarray(pos, dtype=np.int64).tolist()]
    done = set(picked)
    rest = [r for r in order if r not in done]
    note = f"lambda={lam:.2f} over the {len(contenders)} candidates within {settings.mmr_floor:.2f} of the best"
    return Diversified(True, note, picked + rest, dict(zip(picked, np.asarray(mscores, dtype=np.float32).tolist())))
