"""What a search returns: :class:`Hit` (one chunk), :class:`StageInfo` (one stage), :class:`SearchResult` (defined
in :mod:`medretrieve.records`, so that the HTTP client returns them without the engine), and :class:`StageLog`,
which records the stages as a search runs.

A result says what the search did: every stage, whether it ran, why not, and how long it took (ms), so a
caller can tell a deadline that cut a stage from a stage that was switched off.
"""
from __future__ import annotations

from typing import List

from ..records import Hit, SearchResult, StageInfo
from ..outbound import Deadline

__all__ = ["Hit", "StageInfo", "SearchResult", "StageLog"]


class StageLog:
    """The stages of one search in the order they ran, each with the time its :class:`Deadline` measured."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.stages: List[StageInfo] = []

    def record(self, name: str, ran: bool, reason: str = "", cut: bool = False) -> None:
        """Add a stage; ``cut``: the deadline made it skip or shrink its work."""
        self.stages.append(StageInfo(name, ran, reason, self.deadline.timings_ms.get(name, 0.0), cut))
