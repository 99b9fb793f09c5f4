"""A search source for the integrations' tests: a real Retriever (or Client) behind a recorder of the options each
search was called with, so a test sees what a framework adapter passed on (k, deadline, sections)."""
from __future__ import annotations

from typing import Any, Dict, List


class RecordingSource:
    """Forwards ``search`` to ``inner`` and keeps each call's keyword arguments in :attr:`calls`."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.calls: List[Dict[str, Any]] = []

    def search(self, question: str, **options: Any) -> Any:
        self.calls.append(dict(options, question=question))
        return self.inner.search(question, **options)
