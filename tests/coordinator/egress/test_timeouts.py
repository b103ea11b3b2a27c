"""``coordinator.egress.timeouts`` behaves as ``asyncio.timeout`` does, scenario by scenario, with every
deadline of the loop on one timer."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from coordinator._core import timers
from coordinator.egress import timeouts

Factory = Callable[[float | None], Any]
BOTH = pytest.mark.parametrize("make", [asyncio.timeout, timeouts.timeout], ids=["asyncio", "shared"])


async def _outcome(make: Factory, delay: float | None, body: Callable[[], Any]) -> str:
    try:
        async with make(delay):
            await body()
    except TimeoutError:
        return "timeout"
    except asyncio.CancelledError:
        return "cancelled"
    return "done"


@BOTH
def test_a_slow_block_times_out_and_a_quick_one_does_not(make: Factory) -> None:
    async def scenario() -> list[str]:
        return [
            await _outcome(make, 0.02, lambda: asyncio.sleep(30)),
            await _outcome(make, 30, lambda: asyncio.sleep(0)),
            await _outcome(make, None, lambda: asyncio.sleep(0.01)),
            await _outcome(make, 0, lambda: asyncio.sleep(30)),  # already due: expires at once
        ]

    assert asyncio.run(scenario()) == ["timeout", "done", "done", "timeout"]


@BOTH
def test_a_cancellation_from_outside_stays_a_cancellation(make: Factory) -> None:
    async def scenario() -> str:
        task = asyncio.ensure_future(_outcome(make, 30, lambda: asyncio.sleep(30)))
        await asyncio.sleep(0.01)
        task.cancel()
        return await task

    assert asyncio.run(scenario()) == "cancelled"


@BOTH
def test_an_inner_deadline_leaves_the_outer_one_running(make: Factory) -> None:
    async def scenario() -> tuple[str, bool]:
        async with make(30):
            inner = await _outcome(make, 0.01, lambda: asyncio.sleep(30))
            await asyncio.sleep(0.01)  # the task was uncancelled: it sleeps on
            current = asyncio.current_task()
            assert current is not None
            return inner, current.cancelling() == 0

    assert asyncio.run(scenario()) == ("timeout", True)


@BOTH
def test_many_deadlines_each_fire_for_their_own_task_only(make: Factory) -> None:
    async def scenario() -> list[str]:
        slow = [_outcome(make, 0.01 * (1 + i % 5), lambda: asyncio.sleep(30)) for i in range(50)]
        quick = [_outcome(make, 30, lambda: asyncio.sleep(0.02)) for _ in range(50)]
        return await asyncio.gather(*slow, *quick)

    assert asyncio.run(scenario()) == ["timeout"] * 50 + ["done"] * 50


def test_disarmed_deadlines_do_not_pile_up() -> None:
    """Thousands of blocks that finish in time leave the shared heap small (no timer per block)."""

    async def scenario() -> int:
        for _ in range(5000):
            async with timeouts.timeout(900):
                pass
        return len(timeouts._deadlines(asyncio.get_running_loop())._heap)

    assert asyncio.run(scenario()) <= timers._SLACK + 1


def test_timeout_at_uses_the_loop_clock() -> None:
    async def scenario() -> tuple[str, str]:
        loop = asyncio.get_running_loop()
        late = await _outcome(
            lambda _d: timeouts.timeout_at(loop.time() + 0.01), 0, lambda: asyncio.sleep(30)
        )
        never = await _outcome(lambda _d: timeouts.timeout_at(None), 0, lambda: asyncio.sleep(0.01))
        return late, never

    assert asyncio.run(scenario()) == ("timeout", "done")
