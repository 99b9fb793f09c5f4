"""Time and calls to other servers, on the ground floor every wing may import: one deadline type
(:class:`Deadline`) and one outbound-HTTP policy (:class:`OutboundPolicy`: an attempt's deadlines, retries and
their backoff, the ``Retry-After`` rule and its cap, reply size caps).

Who calls out: the HTTP client (:mod:`medretrieve.client`, medretrieve's own server), the LLM backends
(:mod:`medretrieve.generation.llm`, an OpenAI-compatible server) and the PubMed source
(:mod:`medretrieve.corpus.eutils`, NCBI's E-utilities). Each keeps its own transport and its own typed errors;
what it decides about time, retries and sizes comes from here, so the three cannot drift apart again.

``deadline_ms=None`` means no deadline everywhere in medretrieve; 0 means already expired. This module imports
nothing else of medretrieve and no third-party package (the lean client reaches it).
"""
from __future__ import annotations

import email.utils
import math
import numbers
import random
import re
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Dict, Iterator, Optional

__all__ = ["Deadline", "OutboundPolicy", "Retry", "RetryAfterError", "parse_retry_after", "MAX_REPLY_BYTES",
           "MAX_HEAD_BYTES", "MAX_HEADERS"]

# reply size caps a caller gets unless it sets its own (bytes): a batch of 100-hit explained results or an efetch
# of 200 abstracts is a few MB; a reply head (status line and headers, interim 1xx heads included) of our
# servers is a few hundred bytes, so 64 KiB and 100 header lines refuse only a head without end
MAX_REPLY_BYTES = 64 * 2**20
MAX_HEAD_BYTES = 64 * 2**10
MAX_HEADERS = 100


class Deadline:
    """A time budget of ``budget_ms`` milliseconds starting now (``None`` or ``math.inf``: no deadline, so
    ``remaining_ms()`` is ``inf`` and ``expired()`` always False). TypeError for a budget that is not a number,
    ValueError for a negative or NaN one.

    A search's stages also record their wall time (ms) in it (:meth:`stage`, ``timings_ms``). The clock is
    ``time.perf_counter`` (monotonic, sub-microsecond).
    """

    def __init__(self, budget_ms: Optional[float] = None) -> None:
        if budget_ms is not None:
            if not isinstance(budget_ms, numbers.Real) or isinstance(budget_ms, bool):
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

    def remaining_s(self) -> float:
        """Seconds left (may be negative once expired; ``inf`` without a deadline)."""
        return self.remaining_ms() / 1000.0

    def expired(self) -> bool:
        return self.remaining_ms() <= 0.0

    def monotonic_end(self) -> Optional[float]:
        """When it expires as a ``time.monotonic()`` value (None without a deadline), for waits on that clock
        (``threading.Condition.wait``, a rate limiter)."""
        return None if self.unlimited else time.monotonic() + self.remaining_s()

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


class RetryAfterError(ValueError):
    """A ``Retry-After`` header that is neither delay-seconds nor an HTTP date."""


_DELAY_SECONDS = re.compile(r"[0-9]{1,9}(\.[0-9]{1,6})?")  # digits (RFC 9110), a fraction tolerated


def parse_retry_after(value: Optional[str]) -> Optional[float]:
    """The seconds a ``Retry-After`` header asks to wait, by the one rule every caller applies (RFC 9110):
    delay-seconds (up to 9 digits, a decimal fraction tolerated) or an HTTP date with its zone (a date already
    past: 0). None when the header is absent; :class:`RetryAfterError` for anything else (``nan``, ``inf``, a
    negative delay, garbage): the caller decides whether that refuses the reply or is read as no header."""
    if value is None:
        return None
    text = value.strip()
    if _DELAY_SECONDS.fullmatch(text):
        return float(text)
    when = None
    try:
        when = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        pass
    if when is None or when.tzinfo is None:
        raise RetryAfterError(f"Retry-After {value[:60]!r} is neither a non-negative number of seconds nor an "
                              "HTTP date")
    return max(when.timestamp() - time.time(), 0.0)


@dataclass(frozen=True)
class Retry:
    """What :meth:`OutboundPolicy.retry` decided: wait ``wait_s`` seconds and try again, or give up (``wait_s``
    None) because of ``why_not``: ``"retry_after"`` (the server asks for longer than ``max_retry_after_s``),
    ``"retries"`` (none left) or ``"deadline"`` (the wait would end past the call's deadline)."""

    wait_s: Optional[float]
    why_not: str = ""
    asked_s: Optional[float] = None  # the server's Retry-After (s), when it sent one


@dataclass(frozen=True)
class OutboundPolicy:
    """How one caller calls another server.

    - ``timeout_s``: one attempt's whole time, connecting, sending and reading the reply together (s), so that
      a server that trickles its head or body is cut there; a streamed body (server-sent events) instead gives
      each wait for its next bytes ``timeout_s``, as an answer may be written for longer. Never past the
      call's deadline (:meth:`attempt_s`).
    - ``max_retries``: attempts after the first, for failures a retry may fix (refused or dropped connections,
      429, 5xx as the caller says), after ``backoff_s * 2**attempt`` seconds (at most ``max_backoff_s``;
      ``jitter``: times 0.5-1.5 at random, so that many callers do not retry in step) or the server's
      ``Retry-After`` (:func:`parse_retry_after`) when it sent one, unless that is over ``max_retry_after_s``.
      A wait that would end past the call's deadline is not taken.
    - ``max_reply_bytes``: the largest reply body read (bytes, after decompression); ``max_head_bytes`` and
      ``max_headers``: the largest reply head and its most header lines.
    """

    timeout_s: float = 30.0
    max_retries: int = 2
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    jitter: bool = False
    max_retry_after_s: float = 60.0
    max_reply_bytes: int = MAX_REPLY_BYTES
    max_head_bytes: int = MAX_HEAD_BYTES
    max_headers: int = MAX_HEADERS

    def __post_init__(self) -> None:
        for name in ("timeout_s", "backoff_s", "max_backoff_s", "max_retry_after_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not float(value) >= 0:
                raise ValueError(f"{name} must be a number >= 0 s, got {value!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0 s, got {self.timeout_s!r}")
        for name in ("max_retries", "max_reply_bytes", "max_head_bytes", "max_headers"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < (0 if name == "max_retries" else 1):
                raise ValueError(f"{name} must be a whole number >= {0 if name == 'max_retries' else 1}, "
                                 f"got {value!r}")

    def attempt_s(self, deadline: Deadline) -> float:
        """How long the next attempt may take (s): ``timeout_s``, or less when the call's deadline is nearer."""
        return min(self.timeout_s, deadline.remaining_s())

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt ``attempt`` (0-based) when the server named no time."""
        wait = min(self.max_backoff_s, self.backoff_s * 2.0 ** attempt)
        return wait * random.uniform(0.5, 1.5) if self.jitter else wait

    def retry(self, attempt: int, deadline: Deadline, retry_after: Optional[str] = None) -> Retry:
        """Whether to try again after attempt ``attempt`` (0-based) failed in a way a retry may fix, and after how
        long: the server's ``retry_after`` header when it sent one (RetryAfterError when it cannot be read), else
        :meth:`backoff`. Checked in this order: the server's time over ``max_retry_after_s``, no retries left, a
        wait past ``deadline``."""
        asked = parse_retry_after(retry_after)
        if asked is not None and asked > self.max_retry_after_s:
            return Retry(None, "retry_after", asked)
        if attempt >= self.max_retries:
            return Retry(None, "retries", asked)
        wait = self.backoff(attempt) if asked is None else asked
        if wait >= deadline.remaining_s():
            return Retry(None, "deadline", asked)
        return Retry(wait, "", asked)
