"""``Pool.observe``: every call's end is told once, with its queue wait, its output or its refusal."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars

from pool_support import SCRIPT, run

from coordinator._core.calls import CallEnded
from coordinator._core.pool import Pool
from coordinator.errors import QuotaExceeded, ScriptError


def test_observers_hear_each_end_with_queue_wait_output_and_errors() -> None:
    async def main() -> list[CallEnded]:
        heard: list[CallEnded] = []
        async with Pool(workers=1, spares=0, region_pipeline=1) as pool:
            pool.observe(heard.append)
            h = await pool.load(SCRIPT, name="obs.rhai", tenant="acme")
            assert await pool.call(h, "talk", tenant="acme") == 5
            try:
                await pool.call(h, "oops", tenant="acme")
            except ScriptError:
                pass
            # One worker, region calls one at a time: the second of two sleepers waits in the queue.
            await asyncio.gather(*(pool.call(h, "sleepy", 0.3, i, tenant="acme") for i in range(2)))
        return heard

    heard = run(main())
    assert [(e.op, e.function) for e in heard[:3]] == [("load", ""), ("call", "talk"), ("call", "oops")]
    assert all(e.tenant == "acme" and e.kind == "region" and e.script == "obs.rhai" for e in heard)
    assert len({e.call_id for e in heard}) == len(heard) == 5
    talk = heard[1]
    assert talk.result is not None and talk.error is None and talk.result.output == ("hello", '"dbg"')
    assert heard[2].result is None and isinstance(heard[2].error, ScriptError)
    waits = sorted(e.queue_wait or 0.0 for e in heard[3:])
    assert all(e.queue_wait is not None and e.queue_wait >= 0 for e in heard)
    assert waits[1] >= 0.2  # waited while the first sleeper ran


def test_a_refused_call_is_told_without_a_queue_wait_and_a_failing_observer_breaks_nothing() -> None:
    async def main() -> tuple[list[CallEnded], int]:
        heard: list[CallEnded] = []

        def broken(ended: CallEnded) -> None:
            raise RuntimeError("observer bug")

        async with Pool(workers=1, spares=0, tenant_max_calls=1) as pool:
            pool.observe(broken)
            pool.observe(heard.append)
            h = await pool.load(SCRIPT, name="q.rhai", tenant="t")
            results = await asyncio.gather(
                pool.call(h, "sleepy", 0.3, 1, tenant="t"),
                pool.call(h, "echo", 2, tenant="t"),
                return_exceptions=True,
            )
        assert results[0] == 1 and isinstance(results[1], QuotaExceeded)
        return heard, len(heard)

    heard, count = run(main())
    refused = [e for e in heard if isinstance(e.error, QuotaExceeded)]
    assert count == 3 and len(refused) == 1
    assert refused[0].queue_wait is None and refused[0].function == "echo"


def test_a_calls_books_are_settled_once_before_its_caller_resumes() -> None:
    """An answered call has left ``inflight``, been counted and been told by the time ``await`` returns
    (its tenant's next call is admitted at once under a quota of one); a caller that gave up before
    the answer came is settled once, as a failure, and its late answer changes nothing."""

    async def main() -> list[CallEnded]:
        heard: list[CallEnded] = []
        async with Pool(workers=1, spares=0, tenant_max_calls=1) as pool:
            pool.observe(heard.append)
            h = await pool.load(SCRIPT, name="books.rhai", tenant="t")
            for i in range(20):
                assert await pool.call(h, "echo", i, tenant="t") == i
                stats = pool.statistics()
                assert (stats.inflight, stats.calls_ok, len(heard)) == (0, i + 2, i + 2)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(pool.call(h, "sleepy", 0.3, 1, tenant="t"), 0.05)
            stats = pool.statistics()
            assert (stats.inflight, stats.calls_failed, len(heard)) == (0, 1, 22)
            assert await pool.call(h, "echo", "after", tenant="t") == "after"  # queued behind the sleeper
            stats = pool.statistics()
            assert (stats.inflight, stats.calls_ok, stats.calls_failed, len(heard)) == (0, 22, 1, 23)
        return heard

    heard = run(main())
    assert len({e.call_id for e in heard}) == 23
    assert [e.function for e in heard if e.result is None] == ["sleepy"]


def test_observers_run_in_each_callers_context() -> None:
    """A host tags its observer's records with what its caller set (a service's request id):
    every call's end is told in its own caller's context, whichever call's answer came first."""
    request: contextvars.ContextVar[str] = contextvars.ContextVar("request", default="none")

    async def main() -> list[tuple[int, str]]:
        heard: list[tuple[int, str]] = []
        async with Pool(workers=2, spares=0) as pool:
            pool.observe(lambda ended: heard.append((ended.call_id, request.get())))
            h = await pool.load(SCRIPT, name="ctx.rhai")

            async def tagged(tag: str, seconds: float) -> None:
                request.set(tag)
                await pool.call(h, "sleepy", seconds, tag)

            await asyncio.gather(tagged("slow", 0.2), tagged("fast", 0.0), tagged("mid", 0.1))
            with contextlib.suppress(ScriptError):
                request.set("failing")
                await pool.call(h, "oops")
        return heard

    tags = [tag for _, tag in run(main())]
    assert tags[0] == "none"  # the load, from the main task
    assert sorted(tags[1:4]) == ["fast", "mid", "slow"] and tags[4] == "failing"
