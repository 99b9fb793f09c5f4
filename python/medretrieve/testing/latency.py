"""Latency budgets: percentiles of measured times against limits in ms, or against a reference measured in the
same run (a ratio, robust to slow or noisy CI machines).

Budgets are keyword arguments named after a percentile: ``p50_ms=20, p99_ms=80`` (absolute, ms) or
``p50_ratio=1.2, p99_ratio=1.5`` (the code path over the reference at that percentile). Percentiles interpolate
linearly between samples (numpy's default), so a p99 from fewer than 100 samples is close to the maximum; such
a budget gets a warning.
"""
from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence

import numpy as np

_KEY = re.compile(r"^p(\d+(?:\.\d+)?)_(ms|ratio)$")


class LatencyBudgetExceeded(AssertionError):
    """A measured percentile is above its budget (the message lists every one that is)."""


def parse_budgets(budgets: Dict[str, float], kind: str) -> Dict[float, float]:
    """``{"p50_ms": 20}`` -> ``{50.0: 20.0}`` for ``kind`` "ms" or "ratio"; ValueError for any other key or a
    limit that is not a finite number > 0."""
    out: Dict[float, float] = {}
    for key, limit in budgets.items():
        m = _KEY.match(key)
        if not m or m.group(2) != kind or not 0 < float(m.group(1)) <= 100:
            raise ValueError(f"unknown latency budget {key!r}: use pNN_{kind}, e.g. p50_{kind}=..., p99_{kind}=...")
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 < limit < float("inf"):
            raise ValueError(f"{key} must be a finite number > 0, got {limit!r}")
        out[float(m.group(1))] = float(limit)
    if not out:
        raise ValueError(f"give at least one budget, e.g. p50_{kind}=... or p99_{kind}=...")
    return out


def _label(p: float) -> str:
    return f"p{p:g}"


@dataclass
class LatencyReport:
    """Percentiles (ms) of one measured code path (and of its reference, for a ratio)."""

    name: str
    samples_ms: List[float]
    reference_ms: Optional[List[float]] = None

    def percentile(self, p: float, reference: bool = False) -> float:
        data = self.reference_ms if reference else self.samples_ms
        if not data:
            raise ValueError(f"{self.name}: no {'reference ' if reference else ''}samples")
        return float(np.percentile(np.asarray(data, dtype=np.float64), p))

    def summary(self, percentiles: Sequence[float] = (50, 90, 99)) -> str:
        parts = [f"{_label(p)}={self.percentile(p):.2f}ms" for p in percentiles]
        if self.reference_ms:
            parts += [f"reference {_label(p)}={self.percentile(p, True):.2f}ms" for p in percentiles]
        return f"{self.name} ({len(self.samples_ms)} rounds): " + ", ".join(parts)


def _few_samples(report: LatencyReport, limits: Dict[float, float]) -> None:
    n = len(report.samples_ms)
    for p in limits:
        if p < 100 and n < 100.0 / (100.0 - p):
            warnings.warn(f"{report.name}: {n} rounds are too few for a {_label(p)} budget (it is the maximum); "
                          f"measure at least {int(np.ceil(100.0 / (100.0 - p)))} rounds", stacklevel=3)


def check_budget(report: LatencyReport, **budgets: float) -> Dict[str, float]:
    """The measured percentiles (ms) named by ``budgets`` (``p50_ms=...``); raises
    :class:`LatencyBudgetExceeded` when any is above its limit."""
    limits = parse_budgets(budgets, "ms")
    _few_samples(report, limits)
    measured = {_label(p): report.percentile(p) for p in limits}
    over = [f"{_label(p)} {measured[_label(p)]:.2f} ms > budget {limit:g} ms" for p, limit in limits.items()
            if measured[_label(p)] > limit]
    if over:
        raise LatencyBudgetExceeded(f"{report.name}: " + "; ".join(over) + f"  [{report.summary()}]")
    return measured


def check_ratio(report: LatencyReport, **budgets: float) -> Dict[str, float]:
    """The ratios (code path / reference) at the percentiles named by ``budgets`` (``p50_ratio=...``); raises
    :class:`LatencyBudgetExceeded` when any is above its limit."""
    limits = parse_budgets(budgets, "ratio")
    _few_samples(report, limits)
    ratios = {_label(p): report.percentile(p) / max(report.percentile(p, True), 1e-9) for p in limits}
    over = [f"{_label(p)} ratio {ratios[_label(p)]:.2f} > budget {limit:g}" for p, limit in limits.items()
            if ratios[_label(p)] > limit]
    if over:
        raise LatencyBudgetExceeded(f"{report.name}: " + "; ".join(over) + f"  [{report.summary()}]")
    return ratios
