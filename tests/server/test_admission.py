"""Admission control on one event loop (no server): slots, FIFO hand-over, queue bound, deadline shedding and
expiry in the queue, cancellation."""
from __future__ import annotations

import asyncio

import pytest

from medretrieve.retrieval.budget import Deadline
from medretrieve.server.admission import Admission, Overloaded, QueueTimeout


def run(coro):
    return asyncio.run(coro)


async def _hold(adm: Admission, release: asyncio.Event, order: list, name: str, budget_ms=None) -> float:
    async with adm.slot(Deadline(budget_ms)) as waited_ms:
        order.append(name)
        await release.wait()
    return waited_ms


def test_slots_are_handed_over_in_arrival_order():
    async def main():
        adm = Admission(limit=2, max_queue=5)
        release = asyncio.Event()
        order: list = []
        tasks = [asyncio.ensure_future(_hold(adm, release, order, n)) for n in "abcde"]
        await asyncio.sleep(0.01)
        assert order == ["a", "b"] and adm.active == 2 and adm.queued == 3
        release.set()
        waited = await asyncio.gather(*tasks)
        assert order == list("abcde") and adm.active == 0 and adm.queued == 0
        assert waited[0] == pytest.approx(0.0, abs=5.0)
    run(main())


def test_full_queue_is_refused_at_once_with_retry_after():
    async def main():
        adm = Admission(limit=1, max_queue=1)
        release = asyncio.Event()
        held = [asyncio.ensure_future(_hold(adm, release, [], n)) for n in "ab"]
        await asyncio.sleep(0.01)
        with pytest.raises(Overloaded) as info:
            async with adm.slot(Deadline(None)):
                pass
        assert info.value.kind == "queue_full" and info.value.retry_after_s >= 1
        release.set()
        await asyncio.gather(*held)
    run(main())


def test_a_deadline_the_expected_wait_would_use_up_is_refused_at_once():
    async def main():
        adm = Admission(limit=1, max_queue=10, work_ms_prior=50.0)
        release = asyncio.Event()
        held = asyncio.ensure_future(_hold(adm, release, [], "a"))
        await asyncio.sleep(0.01)
        with pytest.raises(Overloaded) as info:  # > 50 ms of wait + > 50 ms of work > 60 ms
            async with adm.slot(Deadline(60)):
                pass
        assert info.value.kind == "deadline" and adm.queued == 0
        release.set()
        await held
    run(main())


def test_deadline_passing_in_the_queue_leaves_it_without_the_slot():
    async def main():
        adm = Admission(limit=1, max_queue=10, work_ms_prior=1.0)
        release = asyncio.Event()
        held = asyncio.ensure_future(_hold(adm, release, [], "a"))
        await asyncio.sleep(0.01)
        ran = []
        with pytest.raises(QueueTimeout):
            async with adm.slot(Deadline(50)):
                ran.append(True)
        assert ran == [] and adm.queued == 0 and adm.active == 1
        release.set()
        await held
        assert adm.active == 0
    run(main())


def test_a_cancelled_waiter_gives_its_place_up():
    async def main():
        adm = Admission(limit=1, max_queue=10)
        release = asyncio.Event()
        order: list = []
        first = asyncio.ensure_future(_hold(adm, release, order, "a"))
        gone = asyncio.ensure_future(_hold(adm, release, order, "gone"))
        last = asyncio.ensure_future(_hold(adm, release, order, "c"))
        await asyncio.sleep(0.01)
        gone.cancel()
        await asyncio.sleep(0.01)
        assert adm.queued == 1
        release.set()
        await asyncio.gather(first, last)
        assert order == ["a", "c"] and adm.active == 0
    run(main())


def test_the_work_estimate_learns_mean_and_spread():
    adm = Admission(limit=2, max_queue=4, work_ms_prior=10.0)
    assert adm.expected_wait_ms() == 0.0 and adm.expected_work_ms() == 30.0  # 10 + 4 x 5
    for work in (40.0, 40.0, 40.0, 40.0, 40.0, 40.0, 40.0, 40.0):
        adm._learn(work)
    assert 30.0 < adm.work_ms.value < 40.0 and adm.expected_work_ms() > adm.work_ms.value
    steady = Admission(limit=2, max_queue=4, work_ms_prior=10.0)
    for _ in range(30):
        steady._learn(10.0)
    assert steady.expected_work_ms() < 10.1  # no spread: the estimate is the mean
    assert steady.retry_after_s() == 1
