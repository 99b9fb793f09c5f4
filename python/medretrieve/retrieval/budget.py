"""Deadlines, per-stage timings and the running cost estimates a search plans its optional stages with.

Every retrieval stage runs inside ``Deadline.stage(name)``, which records its wall time (ms) into
``Deadline.timings_ms``; optional stages ask ``remaining_ms()`` first and shrink or skip themselves when time is
short, planning with :class:`CostModel`'s running estimates. The clock is ``time.perf_counter`` (monotonic,
sub-microsecond). ``deadline_ms=None`` means no deadline everywhere in medretrieve; 0 means already expired.
"""
from __future__ import annotations

import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Dict, Iterator, Optional


class Deadline:
    """A time budget of ``budget_ms`` milliseconds starting now.

    ``budget_ms=None`` (or ``math.inf``) means no deadline: ``remaining_ms()`` is
    ``inf`` and ``expired()`` is always False.
    """

    def __init__(self, budget_ms: Optional[float] = None) -> None:
        if budget_ms is not None:
            if not isinstance(budget_ms, (int, float)) or isinstance(budget_ms, bool):
                raise TypeError(f"deadline budget must be a number of ms, got {type(budget_ms).__name__}")
            if budget_ms != budget_ms or budget_ms < 0:  # NaN or negative
                raise ValueError(f"deadline budget must be >= 0 ms, got {budget_ms}")
        self.budget_ms: float = float("inf") if budget_ms is None else float(budget_ms)
        self.start = time.perf_counter()
        self.timings_ms: Dict[str, float] = {}

    @property
    def unlimited(self) -> bool:
        return math.isinf(self.budget_ms)

    def elapsed_ms(self) -> float:
        """Milliseconds since the deadline was created."""
        return (time.perf_counter() - self.start) * 1000.0

    def remaining_ms(self) -> float:
        """Milliseconds left (may be negative once expired; ``inf`` without a deadline)."""
        return self.budget_ms - self.elapsed_ms()

    def expired(self) -> bool:
        return self.remaining_ms() <= 0.0

    def share_ms(self, fraction: float) -> float:
        """``fraction`` of the whole budget in ms (0 without a deadline): time a stage keeps for later ones."""
        return 0.0 if self.unlimited else fraction * self.budget_ms

    def fork(self) -> "Deadline":
        """The same budget and start with timings of its own: stages run for a sub-search (e.g. the local
        collection's first stages under an online search) are timed apart from the main search's."""
        other = Deadline(None if self.unlimited else self.budget_ms)
        other.start = self.start
        return other

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        """Time the enclosed block; the ms add up under ``timings_ms[name]``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.timings_ms[name] = self.timings_ms.get(name, 0.0) + (time.perf_counter() - t0) * 1000.0

    def finish(self) -> Dict[str, float]:
        """The recorded timings plus ``"total"`` (ms since start)."""
        out = dict(self.timings_ms)
        out["total"] = self.elapsed_ms()
        return out


class Ema:
    """Exponential moving average of a cost (ms), seeded with a prior."""

    def __init__(self, prior: float, alpha: float = 0.2) -> None:
        self.value = prior
        self.alpha = alpha

    def update(self, x: float) -> None:
        # one outlier (a cold start, a descheduled thread) moves the estimate at most 2x
        x = min(max(x, self.value / 2.0), self.value * 2.0)
        self.value = (1 - self.alpha) * self.value + self.alpha * x


@dataclass
class CostModel:
    """Running estimates (ms) of the stages whose work a search sizes to the time left."""

    encode_ms: Ema = field(default_factory=lambda: Ema(15.0))  # one query text through the query encoder
    ce_pair_ms: Ema = field(default_factory=lambda: Ema(4.0))  # one (question, chunk) pair through a cross-encoder
    feedback_ms: Ema = field(default_factory=lambda: Ema(10.0))  # the pseudo-relevance-feedback search
