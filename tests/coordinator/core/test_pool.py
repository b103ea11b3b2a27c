"""Pool API against real workers: load, call, errors with their fields, affinity, backpressure, recycling."""

from __future__ import annotations

import asyncio
import dataclasses
import os
import stat
from collections import Counter

import pytest
from pool_support import SCRIPT, run

from coordinator._core.config import Deadlines, Limits, PoolConfig, Recycling
from coordinator._core.pool import Pool
from coordinator.errors import (
    CompileError,
    LimitExceeded,
    MissingFunction,
    NoWorkerAvailable,
    Overloaded,
    PoolClosed,
    ScriptError,
    ScriptTimeout,
)
from proto import Call as CallMessage
from proto import decode


def test_load_returns_a_content_addressed_handle() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai", require=[("render", 1)])
            again = await pool.load(SCRIPT, name="s.rhai")
            assert handle is again and len(handle.sha256) == 64 and handle.kind == "region"
            assert ("add", 2) in handle.functions and handle.has_function("render", 1)
            with pytest.raises(MissingFunction, match="on_write/1"):
                await pool.load(SCRIPT, name="s.rhai", require=[("on_write", 1)])

    run(scenario())


def test_compile_error_carries_line_and_column() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool:
            with pytest.raises(CompileError) as info:
                await pool.load("fn ok() { 1 }\nfn bad( { }", name="bad.rhai")
            assert info.value.line == 2 and info.value.column and info.value.name == "bad.rhai"
            with pytest.raises(CompileError, match="eval"):
                await pool.load('fn f() { eval("1") }', name="eval.rhai")

    run(scenario())


def test_call_values_and_detailed_cost() -> None:
    async def scenario() -> None:
        async with Pool(workers=2) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            assert await pool.call(handle, "add", 40, 2) == 42
            value = {"a": [1, 2.5, None, True, "x"], "b": b"\x00\x01"}
            assert await pool.call(handle, "echo", value) == value
            detail = await pool.call_detailed(handle, "talk")
            assert detail.value == 5 and detail.output[0] == "hello" and "dbg" in detail.output[1]
            assert detail.wall > 0 and detail.cpu >= 0 and detail.peak_rss > 1 << 20 and detail.operations > 0

    run(scenario())


def test_script_errors_are_typed_with_fields() -> None:
    async def scenario() -> None:
        async with Pool(workers=1) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            with pytest.raises(ScriptError) as info:
                await pool.call(handle, "fail", "nope", tenant="acme")
            err = info.value
            assert err.rhai_class == "ScriptThrow" and err.value == {
                "message": "nope",
                "transient": True,
                "kind": "api",
            }
            assert (err.tenant, err.script, err.sha) == ("acme", "s.rhai", handle.sha256) and err.call_id > 0
            assert err.worker_id and err.line == 8
            with pytest.raises(ScriptError) as info:
                await pool.call(handle, "oops")
            assert info.value.rhai_class == "FunctionNotFound"
            with pytest.raises(ScriptError, match="add"):
                await pool.call(handle, "add", 1)  # wrong arity
            with pytest.raises(LimitExceeded) as limit:
                await pool.call(handle, "spin")
            assert limit.value.limit == "operations"
            with pytest.raises(ScriptTimeout):
                await pool.call(handle, "sleepy", 5, 1, timeout=0.2)
            assert await pool.call(handle, "add", 1, 1) == 2

    run(scenario())


def test_affinity_sends_source_once_per_worker() -> None:
    """Every CALL the pool sends is decoded on its way out: the source goes to each worker at most once."""

    async def scenario() -> None:
        async with Pool(workers=2, spares=0) as pool:
            sources: Counter[bytes] = Counter()
            calls: Counter[bytes] = Counter()
            send_frames = pool._router.send_frames

            def counting(identity: bytes, frames: list[bytes]) -> bool:
                message = decode(frames)
                if isinstance(message, CallMessage):
                    calls[identity] += 1
                    sources[identity] += message.source is not None
                return send_frames(identity, frames)

            pool._router.send_frames = counting  # type: ignore[method-assign]
            handle = await pool.load(SCRIPT, name="s.rhai")
            await asyncio.gather(*(pool.call(handle, "add", i, i) for i in range(200)))
            assert sum(calls.values()) == 201 and pool.statistics().exits == 0
            # both workers ran calls (pipeline depth comes before affinity), each got the source once
            assert len(calls) == 2 and sorted(sources.values()) == [1, 1]

    run(scenario())


def test_ipc_directory_is_private() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool:
            directory = os.path.dirname(pool.endpoint.removeprefix("ipc://"))
            assert stat.S_IMODE(os.stat(directory).st_mode) == 0o700
        assert not os.path.exists(directory)

    run(scenario())


def test_bounded_queue_raises_overloaded() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0, queue_size=3, region_pipeline=1) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            calls = [asyncio.ensure_future(pool.call(handle, "sleepy", 0.3, i, timeout=5)) for i in range(6)]
            results = await asyncio.gather(*calls, return_exceptions=True)
            overloaded = [r for r in results if isinstance(r, Overloaded)]
            assert len(overloaded) == 2 and results[:4] == [0, 1, 2, 3]

    run(scenario())


def test_a_full_queue_turns_away_the_flooding_tenant_not_a_quiet_one() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0, queue_size=4, region_pipeline=1) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            flood = [
                asyncio.ensure_future(pool.call(handle, "sleepy", 0.1, i, timeout=5, tenant="flood"))
                for i in range(5)  # one runs, four fill the queue
            ]
            await asyncio.sleep(0.05)
            quiet = asyncio.ensure_future(pool.call(handle, "add", 1, 2, tenant="quiet"))
            more = asyncio.ensure_future(pool.call(handle, "sleepy", 0, "late", tenant="flood"))
            results = await asyncio.gather(*flood, more, return_exceptions=True)
            assert await quiet == 3
            assert results[:4] == [0, 1, 2, 3]
            assert isinstance(results[4], Overloaded) and "pushed out" in str(results[4])
            assert isinstance(results[5], Overloaded) and "'flood' holds the most" in str(results[5])

    run(scenario())


def test_a_tenant_over_its_inflight_cap_waits_while_others_are_placed() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0, provider_capacity=8, tenant_max_inflight=2) as pool:
            handle = await pool.load("fn nap(s, v) { sleep(s); v }", name="nap.rhai", kind="provider")
            busy = [
                asyncio.ensure_future(pool.call(handle, "nap", 1.0, i, tenant="busy", timeout=10))
                for i in range(5)
            ]
            while len(pool.workers()[0].running) < 2:
                await asyncio.sleep(0.005)
            assert await pool.call(handle, "nap", 0, "quiet", tenant="quiet") == "quiet"
            assert not any(task.done() for task in busy)  # placed at once, beside the capped tenant
            most = 0
            while not all(task.done() for task in busy):
                most = max(most, len(pool.workers()[0].running))
                await asyncio.sleep(0.01)
            assert [task.result() for task in busy] == [0, 1, 2, 3, 4] and most == 2
            assert pool.statistics().inflight == 0

    run(scenario())


def test_queue_wait_limit_is_overloaded() -> None:
    async def scenario() -> None:
        config = PoolConfig(workers=1, spares=0, region_pipeline=1, deadlines=Deadlines(queue=0.2))
        async with Pool(config) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            slow = asyncio.ensure_future(pool.call(handle, "sleepy", 1, "slow", timeout=5))
            await asyncio.sleep(0.05)
            with pytest.raises(Overloaded, match="queue wait"):
                await pool.call(handle, "add", 1, 2)
            assert await slow == "slow"

    run(scenario())


def test_recycling_by_call_count_fails_and_delays_nothing() -> None:
    async def scenario() -> None:
        config = PoolConfig(workers=1, spares=1, recycling=Recycling(max_calls=20))
        async with Pool(config) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            first = {w.pid for w in pool.workers()}
            for i in range(200):
                assert await asyncio.wait_for(pool.call(handle, "add", i, 1), 10) == i + 1
                await asyncio.sleep(0.01)  # recycling waits for a warm spare, so give spares time
            stats = pool.statistics()
            assert stats.calls_failed == 0 and stats.exit_reasons.get("goodbye", 0) >= 2
            assert not first & {w.pid for w in pool.workers() if w.state == "active"}

    run(scenario())


def test_closed_pool_refuses_calls() -> None:
    async def scenario() -> None:
        pool = Pool(workers=1, spares=0)
        async with pool:
            handle = await pool.load(SCRIPT)
        with pytest.raises(PoolClosed):
            await pool.call(handle, "add", 1, 2)

    run(scenario())


def test_close_cancels_long_calls_and_leaves_no_process() -> None:
    async def scenario() -> None:
        config = PoolConfig(workers=1, spares=1, deadlines=Deadlines(shutdown_grace=0.3))
        async with Pool(config) as pool:
            handle = await pool.load(SCRIPT)
            pending = asyncio.ensure_future(pool.call(handle, "sleepy", 20, 1, timeout=30))
            await asyncio.sleep(0.1)
        with pytest.raises(Exception, match="closed"):
            await pending

    run(scenario())


def test_a_caller_that_gives_up_cancels_its_call_on_the_worker() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0, region_pipeline=1) as pool:
            provider = await pool.load("fn wait() { sleep(20); 1 }", name="p.rhai", kind="provider")
            region = await pool.load(SCRIPT, name="s.rhai")
            with pytest.raises(TimeoutError):
                await asyncio.wait_for(pool.call(provider, "wait", timeout=30), 0.3)
            busy = asyncio.ensure_future(pool.call(region, "sleepy", 0.3, "done"))
            await asyncio.sleep(0.05)
            with pytest.raises(TimeoutError):  # gives up while queued behind ``busy``
                await asyncio.wait_for(pool.call(region, "add", 1, 1), 0.1)
            assert await busy == "done"
            await asyncio.sleep(0.2)
            stats = pool.statistics()
            assert stats.inflight == 0 and stats.queued == 0 and pool.workers()[0].inflight == 0

    run(scenario())


def test_close_lets_calls_in_flight_finish_within_the_grace() -> None:
    async def scenario() -> None:
        config = PoolConfig(workers=1, spares=0, deadlines=Deadlines(shutdown_grace=10.0))
        pool = Pool(config)
        async with pool:
            handle = await pool.load(SCRIPT)
            pending = asyncio.ensure_future(pool.call(handle, "sleepy", 0.3, "finished", timeout=5))
            while not pool.workers()[0].running:
                await asyncio.sleep(0.005)
        assert await pending == "finished"  # drained, not cancelled
        stats = pool.statistics()
        assert stats.calls_ok == 2 and stats.calls_failed == 0 and stats.exit_reasons == {"goodbye": 1}

    run(scenario())


def test_workers_that_cannot_start_fail_the_start_with_no_worker_available() -> None:
    async def scenario() -> None:
        config = PoolConfig(workers=1, spares=0, limits=Limits(memory_bytes=8 << 20))
        with pytest.raises(NoWorkerAvailable, match="exit before READY"):
            async with Pool(config):
                pass

    run(scenario())


def test_statistics_count_queued_and_held_calls_per_tenant() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0, region_pipeline=1) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai")
            busy = [
                asyncio.ensure_future(pool.call(handle, "sleepy", 0.3, i, timeout=5, tenant="busy"))
                for i in range(3)  # one runs, two wait
            ]
            await asyncio.sleep(0.1)
            quiet = asyncio.ensure_future(pool.call(handle, "add", 1, 2, tenant="quiet"))
            await asyncio.sleep(0.05)
            stats = pool.statistics()
            assert stats.inflight_by_tenant == {"busy": 1}
            assert stats.queued_by_tenant == {"busy": 2, "quiet": 1}
            assert stats.queued == 3
            assert await asyncio.gather(*busy, quiet) == [0, 1, 2, 3]
            await asyncio.sleep(0.05)  # the pool settles a call one loop step after its caller hears
            before, stats = stats, pool.statistics()
            assert stats.queued_by_tenant == {} and stats.inflight_by_tenant == {}
            # a snapshot: what was read stays as it was, and nothing reads it back into the pool
            assert before.inflight_by_tenant == {"busy": 1} and before.queued == 3
            assert stats.calls_ok == before.calls_ok + 4
            with pytest.raises(dataclasses.FrozenInstanceError):
                stats.queued = 1  # type: ignore[misc]

    run(scenario())
