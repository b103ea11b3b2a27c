"""``TimerHeap``: many deadlines on one loop timer, cancelled by a flag, expiring in order."""

from __future__ import annotations

import asyncio

from coordinator._core.timers import TimerHeap


async def _deadlines_expire_in_order_and_cancelled_ones_never_fire() -> None:
    loop = asyncio.get_running_loop()
    fired: list[str] = []
    done = loop.create_future()

    def expired(name: str) -> None:
        fired.append(name)
        if name == "last":
            done.set_result(None)

    deadlines: TimerHeap[str] = TimerHeap(expired)
    deadlines.arm("late", 0.06)
    early = deadlines.arm("early", 0.02)
    deadlines.arm("earliest", 0.01)  # armed after a later one: the timer moves earlier
    deadlines.arm("last", 0.08)
    cancelled = deadlines.arm("cancelled", 0.04)
    cancelled.cancel()
    cancelled.cancel()  # idempotent
    assert len(deadlines) == 4 and early.armed and not cancelled.armed
    await asyncio.wait_for(done, 5)
    assert fired == ["earliest", "early", "late", "last"]
    assert len(deadlines) == 0 and not early.armed


async def _cancelled_entries_are_dropped_and_the_armed_ones_still_fire() -> None:
    fired: list[int] = []
    deadlines: TimerHeap[int] = TimerHeap(fired.append)
    keep = [deadlines.arm(i, 0.01) for i in range(5)]
    for i in range(10_000):
        deadlines.arm(100 + i, 60.0).cancel()
    assert len(deadlines) == 5
    assert len(deadlines._heap) < 200  # rebuilt without the cancelled ones, not 10 005 long
    while len(fired) < 5:
        await asyncio.sleep(0.01)
    assert sorted(fired) == [0, 1, 2, 3, 4] and not any(d.armed for d in keep)


async def _a_handler_may_cancel_a_later_deadline_and_arm_a_new_one() -> None:
    fired: list[str] = []
    later = None

    def expired(name: str) -> None:
        fired.append(name)
        if name == "first":
            assert later is not None
            later.cancel()
            deadlines.arm("rearmed", 0.0)
        if name == "boom":
            raise RuntimeError("a handler's bug stays in the log")

    deadlines: TimerHeap[str] = TimerHeap(expired)
    deadlines.arm("boom", 0.0)
    deadlines.arm("first", 0.0)
    later = deadlines.arm("later", 0.0)
    while "rearmed" not in fired:
        await asyncio.sleep(0.01)
    assert fired == ["boom", "first", "rearmed"]


def test_deadlines_expire_in_order_and_cancelled_ones_never_fire() -> None:
    asyncio.run(_deadlines_expire_in_order_and_cancelled_ones_never_fire())


def test_cancelled_entries_are_dropped_and_the_armed_ones_still_fire() -> None:
    asyncio.run(_cancelled_entries_are_dropped_and_the_armed_ones_still_fire())


def test_a_handler_may_cancel_a_later_deadline_and_arm_a_new_one() -> None:
    asyncio.run(_a_handler_may_cancel_a_later_deadline_and_arm_a_new_one())


async def _arm_at_takes_the_loop_clock_and_a_passed_time_fires_at_once() -> None:
    loop = asyncio.get_running_loop()
    fired: list[str] = []
    deadlines: TimerHeap[str] = TimerHeap(fired.append)
    deadlines.arm_at("later", loop.time() + 0.03)
    deadlines.arm_at("passed", loop.time() - 1.0)
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert fired == ["passed"]
    while len(fired) < 2:
        await asyncio.sleep(0.01)
    assert fired == ["passed", "later"] and len(deadlines) == 0


def test_arm_at_takes_the_loop_clock_and_a_passed_time_fires_at_once() -> None:
    asyncio.run(_arm_at_takes_the_loop_clock_and_a_passed_time_fires_at_once())


def test_deadlines_keep_no_loop_alive() -> None:
    """One ``TimerHeap`` per loop in a weak mapping (egress's timeouts) must let a closed loop go."""
    import gc
    import weakref

    kept: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TimerHeap[str]] = weakref.WeakKeyDictionary()

    async def arm_one() -> None:
        deadlines: TimerHeap[str] = TimerHeap(lambda _: None)
        kept[asyncio.get_running_loop()] = deadlines
        deadlines.arm("x", 60.0).cancel()

    loop = asyncio.new_event_loop()
    loop.run_until_complete(arm_one())
    loop.close()
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None and len(kept) == 0
