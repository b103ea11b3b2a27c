"""Blame that holds and the caller's timeout as the bound (issue 22 points 6 and 7): real workers.

- a worker killed for a lost heartbeat blames the one call that was running: strikes, then quarantine,
  while another tenant's calls keep succeeding;
- a provider script building a value 150 000 deep (quadratic in cost, inside its operation budget)
  ends in ``LimitExceeded`` within its budget's CPU, and kills no worker however often it is sent;
- a tenant holding 16 slow provider calls on a worker, then sending a closure chain, gets an
  operation budget its (floor) stack can hold: the chain ends in a limit, the worker lives;
- a call with ``timeout=T`` on a frozen worker is answered at T (+50 ms), region and provider alike;
  the worker is killed a ``kill_grace`` later, and nobody is blamed for the freeze.
"""

from __future__ import annotations

import asyncio
import os
import signal
import statistics
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Final

import pytest
from pool_support import SCRIPT, run

from coordinator._core.config import Deadlines, PoolConfig, RetryPolicy
from coordinator._core.pool import Pool
from coordinator.errors import CallFailed, LimitExceeded, Quarantined, ScriptTimeout, WorkerCrashed

HOSTILE: Final = Path(__file__).resolve().parents[1] / "hostile" / "scripts"
DEEP_ARRAY: Final = """
fn initialize(config) { #{} }
fn inference(state, request) { #{} }
fn deep() { let v = []; for i in 0..150000 { v = [v]; } 0 }
"""
HELD: Final = "fn hold(url) { http_get(url) }\nfn nap(s, v) { sleep(s); v }\nfn add(a, b) { a + b }"
ANSWER_SLACK: Final = 0.05
"""The bound: a call is answered at most this long after its timeout."""


class Silent:
    """A host handler whose requests never answer (a slow upstream): the call holds its stack meanwhile."""

    sent = False

    def begin_attempt(self, spawn: object) -> None:
        pass

    async def call(self, name: str, args: list[Any]) -> Any:
        await asyncio.sleep(3600)

    async def stream(self, name: str, args: list[Any]) -> AsyncIterator[Any]:  # pragma: no cover
        yield None


async def running_pid(pool: Pool, function: str) -> int:
    for _ in range(2000):
        busy = [w for w in pool.workers() if any(r.endswith(f":{function}") for r in w.running)]
        if busy:
            return busy[0].pid
        await asyncio.sleep(0.005)
    raise AssertionError(f"no worker picked up {function}")


def ready(pool: Pool) -> bool:
    """One worker active and one spare warm, none of them holding a call."""
    workers = pool.workers()
    states = sorted(w.state for w in workers)
    return states == ["active", "spare"] and not any(w.running for w in workers)


async def until(predicate: Any, what: str, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting until {what}")
        await asyncio.sleep(0.01)


def test_a_script_that_stalls_its_workers_heartbeat_is_blamed_and_quarantined() -> None:
    """The deep array runs on the worker's loop thread (its first provider call) for up to its CPU charge,
    far longer than this pool's liveness window: each death blames it alone, two quarantine it."""

    async def scenario() -> None:
        config = PoolConfig(
            workers=2,
            spares=1,
            deadlines=Deadlines(heartbeat=0.03, liveness=3),
            retry=RetryPolicy(strikes=2, quarantine=60),
        )
        async with Pool(config) as pool:
            attacker = await pool.load(DEEP_ARRAY, name="deep.rhai", kind="provider", tenant="a")
            bystander = await pool.load(SCRIPT, name="b.rhai", tenant="b")
            served: list[int] = []

            async def calls_of_b() -> None:
                for i in range(100_000):
                    served.append(await pool.call(bystander, "add", i, 0, timeout=10, tenant="b"))
                    await asyncio.sleep(0.01)

            background = asyncio.ensure_future(calls_of_b())
            crashed = 0
            try:
                for _ in range(8):
                    try:
                        await pool.call(attacker, "deep", timeout=30, tenant="a")
                    except WorkerCrashed as exc:  # blamed: the only call running at the death
                        assert "heartbeat lost" in str(exc) and exc.tenant == "a", exc
                        assert exc.sha == attacker.sha256
                        crashed += 1
                    except LimitExceeded as exc:  # a region call of b's waited there: no heartbeat owed
                        assert exc.limit == "operations"
                    except Quarantined:
                        break
                else:
                    raise AssertionError("the script was never quarantined")
                count = len(served)
                await until(lambda: len(served) > count + 3, "b's calls are served after the quarantine")
                assert not background.done(), "a call of b's failed"
            finally:
                background.cancel()
            stats = pool.statistics()
            assert crashed == 2 and stats.exit_reasons == {"heartbeat lost": 2}  # never re-run
            assert stats.quarantined == 1
            assert served == list(range(len(served)))  # b lost no call

    run(scenario(), timeout=120)


def test_a_deep_array_ends_within_its_budget_and_kills_no_worker() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=1) as pool:
            handle = await pool.load(DEEP_ARRAY, name="deep.rhai", kind="provider", tenant="a")
            for _ in range(6):
                started = time.monotonic()
                with pytest.raises(LimitExceeded) as info:
                    await pool.call(handle, "deep", timeout=60, tenant="a")
                assert info.value.limit == "operations"
                assert time.monotonic() - started < 10  # 0.25 s of CPU, far from its 60 s timeout
            stats = pool.statistics()
            assert stats.exits == 0 and stats.retries == 0 and stats.quarantined == 0

    run(scenario(), timeout=120)


def test_a_closure_chain_beside_sixteen_held_calls_does_not_kill_the_worker() -> None:
    """16 calls hold their stacks (waiting on a silent upstream) past the address-space share full-size
    stacks get: the chain gets the floor stack, and with it an operation budget that stack can hold."""
    chain = (HOSTILE / "stack_closure_chain_provider.rhai").read_text()

    async def scenario() -> None:
        async with Pool(workers=1, spares=1) as pool:
            held_script = await pool.load(HELD, name="held.rhai", kind="provider", tenant="a")
            attack = await pool.load(chain, name="chain.rhai", kind="provider", tenant="a")
            victim = await pool.load(HELD, name="victim.rhai", kind="provider", tenant="b")
            (pid,) = [w.pid for w in pool.workers() if w.state == "active"]
            held = [
                asyncio.ensure_future(
                    pool.call(held_script, "hold", "http://x", timeout=60, host=Silent(), tenant="a")
                )
                for _ in range(16)
            ]
            await until(lambda: sum(len(w.running) for w in pool.workers()) >= 16, "16 calls are held")
            for _ in range(3):
                with pytest.raises(LimitExceeded) as info:
                    await pool.call(attack, "chain", timeout=30, tenant="a")
                assert info.value.limit == "operations"
            assert await pool.call(victim, "add", 2, 3, tenant="b") == 5  # the neighbour's call is served
            assert await pool.call(victim, "nap", 0.01, "ok", tenant="b") == "ok"
            for task in held:
                task.cancel()
            await asyncio.gather(*held, return_exceptions=True)
            stats = pool.statistics()
            assert [w.pid for w in pool.workers() if w.state == "active"] == [pid]
            assert stats.exits == 0 and stats.quarantined == 0

    run(scenario(), timeout=120)


@pytest.mark.parametrize("kind", ["region", "provider"])
def test_a_call_on_a_frozen_worker_is_answered_at_its_timeout(kind: str) -> None:
    """SIGSTOP mid-call: the answer comes at the timeout (+50 ms), not after the kill grace; the worker
    is killed a grace later, as frozen (nobody blamed).  Several runs: the median must meet the bound
    and none may come near the grace (a loaded machine may delay one answer, never by a grace)."""
    timeout, grace, runs = 1.0, 2.0, 5

    async def scenario() -> None:
        config = PoolConfig(workers=1, spares=1, deadlines=Deadlines(kill_grace=grace))
        async with Pool(config) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai", kind=kind)
            late: list[float] = []
            for n in range(runs):
                started = time.monotonic()
                task = asyncio.ensure_future(pool.call(handle, "sleepy", 30, "late", timeout=timeout))
                os.kill(await running_pid(pool, "sleepy"), signal.SIGSTOP)
                with pytest.raises(ScriptTimeout, match="deadline") as info:
                    await task
                late.append(time.monotonic() - started - timeout)
                assert "stopped (SIGSTOP)" in str(info.value)
                await until(lambda n=n: pool.statistics().exits == n + 1, "the frozen worker is killed")
                await until(lambda: ready(pool), "a spare takes its place")
            assert statistics.median(late) <= ANSWER_SLACK, f"answered late by {late}"
            assert max(late) < grace / 2, f"answered late by {late}"
            stats = pool.statistics()
            assert stats.exit_reasons.get("frozen (SIGSTOP)") == runs
            assert stats.retries == 0 and stats.quarantined == 0
            assert await pool.call(handle, "add", 1, 2) == 3

    run(scenario(), timeout=120)


def test_a_rerun_ends_at_the_first_attempts_deadline() -> None:
    """Killed (by someone else) mid-call and re-run: the re-run is answered at the call's own timeout,
    not a second timeout later and not a grace later."""
    timeout = 1.5

    async def scenario() -> None:
        config = PoolConfig(workers=1, spares=1, deadlines=Deadlines(kill_grace=2.0))
        async with Pool(config) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            late: list[float] = []
            for n in range(3):
                started = time.monotonic()
                task = asyncio.ensure_future(pool.call(handle, "sleepy", 30, "late", timeout=timeout))
                pid = await running_pid(pool, "sleepy")
                await asyncio.sleep(0.5)
                os.kill(pid, signal.SIGKILL)
                await until(lambda p=pid: all(w.pid != p for w in pool.workers()), "the worker is replaced")
                os.kill(await running_pid(pool, "sleepy"), signal.SIGSTOP)  # the re-run's worker freezes
                with pytest.raises(CallFailed):
                    await task
                late.append(time.monotonic() - started - timeout)
                await until(lambda n=n: pool.statistics().exits == 2 * (n + 1), "the frozen worker is killed")
                await until(lambda: ready(pool), "a spare takes its place")
            assert statistics.median(late) <= ANSWER_SLACK, f"answered late by {late}"
            assert pool.statistics().retries == 3 and pool.statistics().quarantined == 0

    run(scenario(), timeout=120)
