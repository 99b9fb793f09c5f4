"""Deadlines and per-stage timings for one request.

Every retrieval stage runs inside ``Deadline.stage(name)``, which records its
wall time (ms) into ``Deadline.timings_ms``; optional stages ask
``remaining_ms()`` first and shrink or skip themselves when time is short.
The clock is ``time.perf_counter`` (monotonic, sub-microsecond).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
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

    def elapsed_ms(self) -> float:
        """Milliseconds since the deadline was created."""
        return (time.perf_counter() - self.start) * 1000.0

    def remaining_ms(self) -> float:
        """Milliseconds left (may be negative once expired; ``inf`` without a deadline)."""
        return self.budget_ms - self.elapsed_ms()

    def expired(self) -> bool:
        return self.remaining_ms() <= 0.0

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
