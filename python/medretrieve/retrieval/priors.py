"""Optional priors on a search's order (issue 45 item 5), each a named search option, off by default: an evidence
level by publication type (``evidence_prior``) and a recency decay with a half-life in years
(``recency_half_life``).

Each prior gives a hit a weight in (0, 1]; the final order is by ``weight / (60 + rank)``, ``rank`` being the hit's
place in the order the stages before gave (0 first), so a prior moves a hit past its neighbours but a strong lead
survives a weak weight (a case report first stays above an unknown type past about rank 15). Scores are left as
the stages gave them. Their effect on answer quality cannot be measured offline: BioASQ's articles come without
their publication types or dates, so neither prior is a default.
"""
from __future__ import annotations

import datetime as _dt
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

#: weight of each MEDLINE publication type (the best a document holds counts); types not listed weigh OTHER
EVIDENCE_LEVELS: Mapping[str, float] = {
    "Practice Guideline": 1.0, "Guideline": 1.0, "Consensus Development Conference": 0.95,
    "Systematic Review": 0.9, "Meta-Analysis": 0.9,
    "Randomized Controlled Trial": 0.8, "Controlled Clinical Trial": 0.7, "Clinical Trial": 0.7,
    "Clinical Trial, Phase III": 0.75, "Clinical Trial, Phase II": 0.65,
    "Cohort Studies": 0.6, "Observational Study": 0.6, "Multicenter Study": 0.6, "Comparative Study": 0.55,
    "Review": 0.6, "Case Reports": 0.4, "Editorial": 0.35, "Comment": 0.35, "Letter": 0.35}
OTHER = 0.5
RANK_OFFSET = 60  # the reciprocal rank's constant, as RRF's


def evidence_weight(metadata: Mapping[str, Any]) -> float:
    """The weight of the best publication type a document's metadata lists (``publication_type``: a list or a
    string); :data:`OTHER` when it lists none known."""
    types = metadata.get("publication_type")
    types = [types] if isinstance(types, str) else types if isinstance(types, (list, tuple)) else []
    known = [EVIDENCE_LEVELS[t] for t in types if isinstance(t, str) and t in EVIDENCE_LEVELS]
    return max(known) if known else OTHER


def recency_weight(metadata: Mapping[str, Any], half_life_years: float, this_year: int) -> Optional[float]:
    """``0.5 ** (age / half_life)`` of a document's ``year`` (an integer, or the year of ``publication_date``);
    None when it has neither (the caller gives it the lowest weight among the hits)."""
    year = metadata.get("year")
    if not (isinstance(year, int) and not isinstance(year, bool)):
        date = metadata.get("publication_date")
        year = int(date[:4]) if isinstance(date, str) and date[:4].isdigit() else None
    if year is None:
        return None
    return float(0.5 ** (max(0, this_year - year) / half_life_years))


def prior_order(order: Sequence[int], metadata_of: Callable[[int], Mapping[str, Any]], evidence: bool,
                half_life_years: Optional[float], this_year: Optional[int] = None) -> List[int]:
    """``order`` (rows, best first) reordered by the priors asked for (module docstring); as it is when none."""
    if not evidence and half_life_years is None:
        return list(order)
    year = this_year if this_year is not None else _dt.date.today().year
    weights: Dict[int, float] = {row: 1.0 for row in order}
    if evidence:
        for row in order:
            weights[row] *= evidence_weight(metadata_of(row))
    if half_life_years is not None:
        decay = {row: recency_weight(metadata_of(row), half_life_years, year) for row in order}
        known = [w for w in decay.values() if w is not None]
        floor = min(known) if known else 1.0
        for row in order:
            w = decay[row]
            weights[row] *= floor if w is None else w
    keyed = sorted(range(len(order)), key=lambda i: (-weights[order[i]] / (RANK_OFFSET + i), i))
    return [order[i] for i in keyed]
