"""Deadlines, per-stage timings and the running cost estimates a search plans its optional stages with.

:class:`~medretrieve.outbound.Deadline` is the package's one deadline type (on the ground floor, shared with the
client, the LLM backends and the PubMed source); it is named here too for the callers that import it from here.
Every retrieval stage runs inside ``Deadline.stage(name)``, which records its wall time (ms) into
``Deadline.timings_ms``; optional stages ask ``remaining_ms()`` first and shrink or skip themselves when time is
short, planning with :class:`CostModel`'s running estimates. The clock is ``time.perf_counter`` (monotonic,
sub-microsecond). ``deadline_ms=None`` means no deadline everywhere in medretrieve; 0 means already expired.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..outbound import Deadline

__all__ = ["Deadline", "Ema", "CostModel"]  # Deadline lives on the ground floor (medretrieve.outbound)


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
