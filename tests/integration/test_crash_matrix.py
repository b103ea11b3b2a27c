"""The crash matrix (loky's ``crash_cases``): each row hurts a worker one way, and every row
asserts the precise outcome *and* that the pool keeps serving other calls meanwhile.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from pool_support import SCRIPT, run

from coordinator._core.config import Deadlines, Limits, PoolConfig, RetryPolicy
from coordinator._core.handles import ScriptHandle
from coordinator._core.pool import Pool
from coordinator.errors import CompileError, LimitExceeded, Quarantined, ScriptTimeout

CONFIG = PoolConfig(
    workers=2,
    spares=1,
    limits=Limits(memory_bytes=768 << 20, watchdog_rss_bytes=4 << 30),
    deadlines=Deadlines(kill_grace=0.5),
)


async def busy_worker_pid(pool: Pool, function: str = "sleepy") -> int:
    """The worker running ``function`` (not the bystander's worker)."""
    for _ in range(500):
        busy = [w for w in pool.workers() if any(r.endswith(f":{function}") for r in w.running)]
        if busy:
            return busy[0].pid
        await asyncio.sleep(0.01)
    raise AssertionError("no worker picked up the call")


async def kill_mid_call(pool: Pool, handle: ScriptHandle) -> Any:
    task = asyncio.ensure_future(pool.call(handle, "sleepy", 0.4, "survived", timeout=5))
    retries = pool.statistics().retries
    os.kill(await busy_worker_pid(pool), signal.SIGKILL)
    value = await task
    assert pool.statistics().retries == retries + 1  # it really was interrupted and re-run
    return value


async def stop_mid_call(pool: Pool, handle: ScriptHandle) -> Any:
    """Frozen: answered at its timeout (the timeout is the bound: no re-run past it), then killed a kill
    grace later (not blamed, not struck) and replaced."""
    started = time.monotonic()
    task = asyncio.ensure_future(pool.call(handle, "sleepy", 0.2, "thawed", timeout=1.0))
    os.kill(await busy_worker_pid(pool), signal.SIGSTOP)
    try:
        return await task
    finally:
        assert time.monotonic() - started < 1.0 + CONFIG.deadlines.kill_grace  # not held by the grace
        for _ in range(500):
            if pool.statistics().exits:
                break
            await asyncio.sleep(0.01)
        stats = pool.statistics()
        assert stats.exit_reasons.get("frozen (SIGSTOP)") == 1 and stats.quarantined == 0


async def kill_idle(pool: Pool, handle: ScriptHandle) -> Any:
    os.kill(pool.workers()[0].pid, signal.SIGKILL)
    await asyncio.sleep(0.2)
    return await pool.call(handle, "add", 1, 2)


async def hostile(fn: str, *args: Any) -> Callable[[Pool, ScriptHandle], Awaitable[Any]]:
    async def row(pool: Pool, handle: ScriptHandle) -> Any:
        return await pool.call(handle, fn, *args, timeout=20)

    return row


async def parens(pool: Pool, handle: ScriptHandle) -> Any:
    return await pool.load("fn f() { " + "(" * 10_000 + "1" + ")" * 10_000 + " }", name="parens.rhai")


CASES: list[tuple[str, Any, Any, str]] = [
    # id, action, expected value or exception class, message regex / limit
    ("sigkill-mid-call", kill_mid_call, "survived", ""),
    ("sigstop-mid-call", stop_mid_call, ScriptTimeout, "deadline"),
    ("sigkill-idle", kill_idle, 3, ""),
    ("loop", ("spin",), LimitExceeded, "operations"),
    ("recursion", ("rec", 0), LimitExceeded, "call_depth"),
    ("memory-bomb", ("keys_bomb",), LimitExceeded, "memory"),
    ("nested-parens", parens, CompileError, "complexity|depth|deep"),
]


@pytest.mark.parametrize(("case", "action", "expected", "detail"), CASES, ids=[c[0] for c in CASES])
def test_crash_matrix(case: str, action: Any, expected: Any, detail: str) -> None:
    async def scenario() -> None:
        async with Pool(CONFIG) as pool:
            handle = await pool.load(SCRIPT, name="hostile.rhai")
            row = await hostile(*action) if isinstance(action, tuple) else action
            served: list[int] = []

            async def bystander() -> None:  # other calls keep being served meanwhile
                for i in range(10_000):
                    served.append(await pool.call(handle, "add", i, 0, timeout=10))
                    await asyncio.sleep(0.005)

            background = asyncio.ensure_future(bystander())
            try:
                if isinstance(expected, type):
                    with pytest.raises(expected) as info:
                        await row(pool, handle)
                    if isinstance(info.value, LimitExceeded):
                        assert info.value.limit == detail
                    else:
                        assert info.value.args and __import__("re").search(detail, str(info.value))
                else:
                    assert await row(pool, handle) == expected
                count = len(served)
                await asyncio.sleep(0.3)
                assert len(served) > count, "bystander calls stopped being served"
            finally:
                background.cancel()
            assert served == list(range(len(served)))
            assert await pool.call(handle, "add", 2, 2) == 4  # the next call on the pool succeeds

    run(scenario())


def test_threaded_deadline_cancels_without_killing_the_worker() -> None:
    class Silent:
        sent = True

        def begin_attempt(self, spawn: object) -> None:
            pass

        async def call(self, name: str, args: list[Any]) -> Any:
            await asyncio.sleep(3600)

        async def stream(self, name: str, args: list[Any]) -> Any:  # pragma: no cover - unused
            yield None

    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool:
            handle = await pool.load('fn f() { http_get("http://x") }', name="p.rhai", kind="provider")
            pid = pool.workers()[0].pid
            started = time.monotonic()
            with pytest.raises(ScriptTimeout):
                await pool.call(handle, "f", timeout=0.3, host=Silent())
            assert time.monotonic() - started < 5
            assert pool.workers()[0].pid == pid  # no collateral kill of a multiplexed worker

    run(scenario())


def test_a_script_that_keeps_killing_workers_is_quarantined() -> None:
    async def scenario() -> None:
        config = PoolConfig(
            workers=1,
            spares=1,
            limits=Limits(memory_bytes=512 << 20),
            retry=RetryPolicy(strikes=2, quarantine=30),
        )
        async with Pool(config) as pool:
            handle = await pool.load(SCRIPT, name="bomb.rhai")
            for _ in range(2):
                with pytest.raises(LimitExceeded):
                    await pool.call(handle, "keys_bomb", timeout=30)
            workers = [(w.pid, w.calls, w.inflight) for w in pool.workers()]
            with pytest.raises(Quarantined, match="quarantined") as info:
                await pool.call(handle, "add", 1, 1)
            assert info.value.sha == handle.sha256
            assert [(w.pid, w.calls, w.inflight) for w in pool.workers()] == workers  # refused at once
            other = await pool.load("fn g() { 7 }", name="fine.rhai")
            assert await pool.call(other, "g") == 7

    run(scenario())


def test_a_killer_beside_other_calls_is_found_by_running_suspects_alone() -> None:
    """A worker dying with several calls running blames none of them: it makes their scripts suspects,
    whose calls then run alone, so the killer's next crash is its own and only it is quarantined."""

    async def scenario() -> None:
        config = PoolConfig(
            workers=1,
            spares=1,
            limits=Limits(memory_bytes=512 << 20),
            retry=RetryPolicy(strikes=2, quarantine=30, max_retries=2),
        )
        async with Pool(config) as pool:
            # a region call beside the provider naps: a provider call's CPU (0.25 s) cannot grow its worker
            # to the memory limit, a region call's (8 s) can (worker/engine.py CPU_SECONDS)
            killer = await pool.load(SCRIPT, name="killer.rhai")
            napper = await pool.load("fn nap(s, v) { sleep(s); v }", name="napper.rhai", kind="provider")
            naps = [asyncio.ensure_future(pool.call(napper, "nap", 1.5, i, timeout=20)) for i in range(3)]
            await busy_worker_pid(pool, "nap")
            with pytest.raises(LimitExceeded) as info:  # blamed once it ran alone, not "worker lost"
                await pool.call(killer, "keys_bomb", timeout=30)
            assert info.value.limit == "memory"
            assert await asyncio.gather(*naps) == [0, 1, 2]  # re-run (alone), not failed
            with pytest.raises(LimitExceeded):
                await pool.call(killer, "keys_bomb", timeout=30)
            with pytest.raises(Quarantined):
                await pool.call(killer, "add", 1, 1)
            assert await pool.call(napper, "nap", 0, "still trusted") == "still trusted"
            assert pool.statistics().quarantined == 1

    run(scenario(), timeout=120)
