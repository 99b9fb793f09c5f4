"""Admission control: at most ``limit`` requests work at once, a bounded FIFO queue waits, the rest is shed.

Why shed instead of queueing everything: searches are CPU-bound, so beyond the machine's capacity a longer queue
only makes every request late. A request is refused at once (:class:`Overloaded`, HTTP 429 with Retry-After) when
the queue is full or when the wait it can expect plus its own work would not fit in its deadline; a queued request
whose deadline passes before it gets a slot leaves the queue (:class:`QueueTimeout`, HTTP 504) without doing the
work. The expectation is deliberately pessimistic, as TCP's retransmission timeout is (RFC 6298): the mean work
time plus four times its mean deviation (both moving averages of the admitted requests), so that under overload
requests are shed with 429 at once rather than queued to time out with 504. All of it runs on one event loop: no
locks.
"""
from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from contextlib import asynccontextmanager
from typing import AsyncIterator, Deque, Optional

from ..outbound import Deadline
from ..retrieval.budget import Ema

_DEVIATIONS = 4  # mean deviations added to the mean work time, as RFC 6298 adds 4 x RTTVAR to SRTT


class Overloaded(Exception):
    """Refused at once: the queue is full (``kind="queue_full"``) or the expected wait does not fit the deadline
    (``kind="deadline"``)."""

    def __init__(self, kind: str, reason: str, retry_after_s: int) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason
        self.retry_after_s = retry_after_s


class QueueTimeout(Exception):
    """The deadline passed before the request got a slot: while it waited, or already when it asked (no work was
    done)."""

    def __init__(self, waited_ms: float) -> None:
        super().__init__(f"the deadline passed {waited_ms:.1f} ms after the request arrived, before the work started")
        self.waited_ms = waited_ms


class Admission:
    """Slots for ``limit`` concurrent requests and a queue of at most ``max_queue`` waiting ones.

    ``work_ms_prior``: the first estimate of one request's work time (ms); :meth:`slot` refines it from the
    requests it admits (exponential moving average).
    """

    def __init__(self, limit: int, max_queue: int, work_ms_prior: float = 20.0) -> None:
        self.limit = limit
        self.max_queue = max_queue
        self.work_ms = Ema(work_ms_prior)  # mean work time of one request
        self.work_dev_ms = work_ms_prior / 2  # its mean absolute deviation (moving average, same weight)
        self.active = 0
        self._waiters: Deque["asyncio.Future[None]"] = deque()

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def expected_wait_ms(self) -> float:
        """The wait (ms) a request arriving now may have before it gets a slot (pessimistic, see above)."""
        if self.active < self.limit and not self._waiters:
            return 0.0
        return (len(self._waiters) + 1) * self.work_ms.value / self.limit + _DEVIATIONS * self.work_dev_ms

    def expected_work_ms(self) -> float:
        """The work time (ms) a request may take once it has a slot (pessimistic, see above)."""
        return self.work_ms.value + _DEVIATIONS * self.work_dev_ms

    def _learn(self, work_ms: float) -> None:
        self.work_dev_ms += self.work_ms.alpha * (abs(work_ms - self.work_ms.value) - self.work_dev_ms)
        self.work_ms.update(work_ms)

    def retry_after_s(self) -> int:
        """Seconds after which a refused request may try again (whole seconds, as HTTP's Retry-After; >= 1)."""
        return max(1, math.ceil((self.expected_wait_ms() + self.expected_work_ms()) / 1000.0))

    @asynccontextmanager
    async def slot(self, deadline: Deadline) -> AsyncIterator[float]:
        """Hold a slot for the enclosed work; yields the ms waited for it. Raises :class:`Overloaded` or
        :class:`QueueTimeout` (see the module docstring)."""
        t0 = time.perf_counter()
        await self._acquire(deadline)
        waited_ms = (time.perf_counter() - t0) * 1000.0
        start = time.perf_counter()
        try:
            yield waited_ms
        finally:
            self._learn((time.perf_counter() - start) * 1000.0)
            self._release()

    async def _acquire(self, deadline: Deadline) -> None:
        if deadline.expired():  # e.g. a budget smaller than the time the request took to arrive and be read
            raise QueueTimeout(deadline.elapsed_ms())
        if self.active < self.limit and not self._waiters:
            self.active += 1
            return
        if len(self._waiters) >= self.max_queue:
            raise Overloaded("queue_full", f"{self.active} requests working and {len(self._waiters)} queued "
                             "(the queue is full)", self.retry_after_s())
        expected = self.expected_wait_ms() + self.expected_work_ms()
        if expected > deadline.remaining_ms():
            raise Overloaded("deadline", f"the expected wait and work ({expected:.0f} ms) exceed the "
                             f"{max(deadline.remaining_ms(), 0.0):.0f} ms left of the deadline", self.retry_after_s())
        waiter: "asyncio.Future[None]" = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await asyncio.wait_for(waiter, None if deadline.unlimited else max(deadline.remaining_ms(), 0.0) / 1000)
        except asyncio.TimeoutError:
            self._drop(waiter)
            raise QueueTimeout(deadline.elapsed_ms()) from None
        except asyncio.CancelledError:  # the client went away or the server stops
            if waiter.done() and not waiter.cancelled():
                self._release()  # a slot was handed over just now: pass it on
            else:
                self._drop(waiter)
            raise

    def _drop(self, waiter: "asyncio.Future[None]") -> None:
        waiter.cancel()
        try:
            self._waiters.remove(waiter)
        except ValueError:
            pass

    def _release(self) -> None:
        """Hand the slot to the first waiter still waiting, else free it."""
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
        self.active -= 1


def remaining_or_none(deadline: Deadline) -> Optional[float]:
    """What is left of ``deadline`` as a library ``deadline_ms`` (None without a deadline; never negative)."""
    return None if deadline.unlimited else max(deadline.remaining_ms(), 0.0)
