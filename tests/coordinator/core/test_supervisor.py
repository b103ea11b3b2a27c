"""Supervision with real processes: death noticed fast, memory watchdog, recycling by age, tenant fairness."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest
from pool_support import SCRIPT, run

from coordinator._core.config import Limits, PoolConfig, Recycling
from coordinator._core.pool import Pool
from coordinator.errors import LimitExceeded


def test_local_worker_death_is_noticed_within_100_ms() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=1) as pool:
            delays = []
            for _ in range(5):
                while not any(w.state == "spare" for w in pool.workers()):
                    await asyncio.sleep(0.01)
                victim = next(w for w in pool.workers() if w.state == "active")
                exits = pool.statistics().exits
                started = time.monotonic()
                os.kill(victim.pid, signal.SIGKILL)
                while pool.statistics().exits == exits:
                    await asyncio.sleep(0.0005)
                delays.append(time.monotonic() - started)
            assert sorted(delays)[len(delays) // 2] < 0.1, delays

    run(scenario())


def test_memory_watchdog_kills_and_blames_the_running_call() -> None:
    async def scenario() -> None:
        limits = Limits(memory_bytes=4 << 30, watchdog_rss_bytes=200 << 20)
        async with Pool(PoolConfig(workers=1, spares=1, limits=limits)) as pool:
            handle = await pool.load(SCRIPT, name="bomb.rhai")
            with pytest.raises(LimitExceeded) as info:
                await pool.call(handle, "keys_bomb", timeout=30)
            assert info.value.limit == "memory" and "memory" in info.value.cause
            assert pool.statistics().exit_reasons.get("memory") == 1
            assert await pool.call(handle, "add", 1, 2) == 3

    run(scenario())


def test_recycling_by_age_fails_nothing() -> None:
    async def scenario() -> None:
        config = PoolConfig(workers=1, spares=1, recycling=Recycling(max_age=0.3))
        async with Pool(config) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            i = 0
            while pool.statistics().exit_reasons.get("goodbye", 0) < 2:  # two recycles observed
                assert await pool.call(handle, "add", i, 1) == i + 1
                i += 1
                await asyncio.sleep(0.005)
            stats = pool.statistics()
            assert stats.exit_reasons.get("goodbye", 0) >= 2 and stats.calls_failed == 0

    run(scenario())


def test_a_quiet_tenant_is_served_while_another_floods() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0, region_pipeline=1) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            flood = [
                asyncio.ensure_future(pool.call(handle, "sleepy", 0.01, i, tenant="flood"))
                for i in range(300)
            ]
            await asyncio.sleep(0.1)
            before = sum(f.done() for f in flood)
            assert await pool.call(handle, "add", 1, 1, tenant="quiet") == 2
            overtaking = sum(f.done() for f in flood) - before
            remaining = sum(not f.done() for f in flood)
            assert remaining > 200, "the flood finished first: the test proves nothing"
            # round robin: the quiet call waits for the flood call running, not for the flood's queue
            assert overtaking <= 2, f"{overtaking} flood calls finished while the quiet tenant waited"
            await asyncio.gather(*flood)

    run(scenario())


def test_recycling_by_memory_growth_fails_nothing() -> None:
    async def scenario() -> None:
        config = PoolConfig(workers=1, spares=1, recycling=Recycling(max_rss_growth=8 << 20))
        async with Pool(config) as pool:
            grow = await pool.load(
                # map keys escape Rhai's size accounting: 2000 keys of 5 kB hold ~10 MB
                "fn grow(n) { let m = #{}; "
                'for i in 0..n { let k = `${i}`; k.pad(5000, "x"); m[k] = i; } m.len() }\n'
                "fn one() { 1 }",
                name="grow.rhai",
            )
            assert await pool.call(grow, "one") == 1
            await asyncio.sleep(0.7)  # the watchdog records the baseline after the first call
            assert await pool.call(grow, "grow", 2000) == 2000
            deadline = time.monotonic() + 10
            while pool.statistics().exit_reasons.get("goodbye", 0) == 0 and time.monotonic() < deadline:
                assert await pool.call(grow, "one") == 1
                await asyncio.sleep(0.05)
            stats = pool.statistics()
            assert stats.exit_reasons.get("goodbye") == 1 and stats.calls_failed == 0

    run(scenario())


def test_recycling_without_configured_spares_warms_a_replacement_first() -> None:
    async def scenario() -> None:
        config = PoolConfig(workers=1, spares=0, recycling=Recycling(max_calls=10))
        async with Pool(config) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            first = pool.workers()[0].pid
            deadline = time.monotonic() + 10
            i = 0
            while pool.statistics().exit_reasons.get("goodbye", 0) == 0 and time.monotonic() < deadline:
                assert await pool.call(handle, "add", i, 1) == i + 1
                i += 1
                await asyncio.sleep(0.01)
            assert pool.statistics().calls_failed == 0
            assert [w.pid for w in pool.workers()] != [first] and len(pool.workers()) <= 2

    run(scenario())


def test_workers_live_in_their_own_session_and_process_group() -> None:
    """A signal to the coordinator's process group (a terminal's Ctrl-C, ``kill -- -pgid``) reaches no
    worker, and one sent by a worker to its own group reaches no coordinator."""

    async def scenario() -> None:
        async with Pool(workers=2, spares=1) as pool:
            for worker in pool.workers():
                assert os.getpgid(worker.pid) == worker.pid != os.getpgid(0)
                assert os.getsid(worker.pid) == worker.pid != os.getsid(0)

    run(scenario())
