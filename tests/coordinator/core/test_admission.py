"""Per-tenant quotas on a real pool: each refusal typed, the tenant's own, and other tenants untouched."""

from __future__ import annotations

import asyncio

import pytest
from pool_support import SCRIPT, run

from coordinator._core.config import PoolConfig
from coordinator._core.pool import Pool
from coordinator.errors import (
    CpuQuotaExceeded,
    QuotaExceeded,
    ScriptQuotaExceeded,
    ScriptTimeout,
    TooManyCallsInFlight,
    TooManyCallsQueued,
)

NAPPER = "fn initialize(config) { #{} }\nfn nap(s, v) { sleep(s); v }"


def test_calls_in_flight_are_capped_per_tenant() -> None:
    async def scenario() -> None:
        async with Pool(PoolConfig(workers=1, spares=0, tenant_max_calls=2)) as pool:
            handle = await pool.load(NAPPER, name="n.rhai", kind="provider", tenant="a")
            held = [asyncio.ensure_future(pool.call(handle, "nap", 0.3, i, tenant="a")) for i in range(2)]
            await asyncio.sleep(0.05)
            with pytest.raises(TooManyCallsInFlight) as info:
                await pool.call(handle, "nap", 0, "third", tenant="a")
            assert isinstance(info.value, QuotaExceeded)
            assert (info.value.tenant, info.value.quota, info.value.limit) == ("a", "calls_in_flight", 2)
            assert await pool.call(handle, "nap", 0, "b", tenant="b") == "b"  # another tenant: its own quota
            assert await asyncio.gather(*held) == [0, 1]
            assert await pool.call(handle, "nap", 0, "again", tenant="a") == "again"  # room once they ended

    run(scenario())


def test_calls_queued_are_capped_per_tenant() -> None:
    async def scenario() -> None:
        config = PoolConfig(workers=1, spares=0, region_pipeline=1, tenant_max_queued=1)
        async with Pool(config) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai", tenant="a")
            running = asyncio.ensure_future(pool.call(handle, "sleepy", 0.3, "runs", tenant="a"))
            await asyncio.sleep(0.05)
            waiting = asyncio.ensure_future(pool.call(handle, "sleepy", 0, "waits", tenant="a"))
            await asyncio.sleep(0.05)
            with pytest.raises(TooManyCallsQueued) as info:
                await pool.call(handle, "add", 1, 2, tenant="a")
            assert (info.value.quota, info.value.limit) == ("calls_queued", 1)
            assert await asyncio.gather(running, waiting) == ["runs", "waits"]

    run(scenario())


def test_cpu_seconds_per_minute_are_charged_and_refused_per_tenant() -> None:
    """An inline call that runs into its deadline held its worker that long: it is charged in full."""

    async def scenario() -> None:
        async with Pool(PoolConfig(workers=1, spares=1, tenant_cpu_seconds_per_minute=0.2)) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai", tenant="hog")
            with pytest.raises(ScriptTimeout):
                await pool.call(handle, "sleepy", 5.0, "late", tenant="hog", timeout=0.3)
            with pytest.raises(CpuQuotaExceeded) as info:
                await pool.call(handle, "add", 1, 2, tenant="hog")
            assert info.value.quota == "cpu_seconds_per_minute" and 55.0 < info.value.retry_after <= 60.0
            assert await pool.call(handle, "add", 1, 2, tenant="quiet") == 3

    run(scenario())


def test_loaded_scripts_are_bounded_per_tenant_and_forgotten_ones_still_run() -> None:
    async def scenario() -> None:
        config = PoolConfig(workers=1, spares=0, tenant_max_scripts=2, tenant_max_script_bytes=4000)
        async with Pool(config) as pool:
            with pytest.raises(ScriptQuotaExceeded, match="bytes"):
                await pool.load("fn f() { 1 }" + " " * 5000, name="big.rhai", tenant="a")
            handles = [await pool.load(f"fn f() {{ {n} }}", name=f"s{n}.rhai", tenant="a") for n in range(3)]
            assert [await pool.call(h, "f", tenant="a") for h in handles] == [0, 1, 2]  # s0 was forgotten
            nappers = [
                await pool.load(NAPPER + f"// {n}", name=f"n{n}.rhai", kind="provider", tenant="a")
                for n in range(2)
            ]
            held = [asyncio.ensure_future(pool.call(h, "nap", 0.3, 0, tenant="a")) for h in nappers]
            await asyncio.sleep(0.05)
            with pytest.raises(ScriptQuotaExceeded, match="call running") as info:  # both held ones are busy
                await pool.load("fn g() { 2 }", name="g.rhai", tenant="a")
            assert info.value.quota == "scripts"
            assert await pool.load("fn g() { 2 }", name="g.rhai", tenant="b")  # another tenant: own quota
            await asyncio.gather(*held)

    run(scenario())


def test_the_source_cache_is_bounded_and_a_forgotten_source_is_sent_again() -> None:
    """Issue 10: every loaded source stayed in the coordinator forever (2 000 × 100 KB added 187 MB)."""

    async def scenario() -> None:
        config = PoolConfig(workers=2, spares=0, script_cache_bytes=20_000, tenant_max_scripts=None)
        async with Pool(config) as pool:
            pad = "// " + "x" * 1000 + "\n"
            handles = [await pool.load(pad + f"fn f() {{ {n} }}", name=f"s{n}.rhai") for n in range(60)]
            assert pool._scripts.cached_bytes <= 20_000
            values = await asyncio.gather(*(pool.call(h, "f") for h in handles))
            assert values == list(range(60))  # whichever worker lacks the AST is sent the source again

    run(scenario())
