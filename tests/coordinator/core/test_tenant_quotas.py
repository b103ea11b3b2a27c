"""Quotas per tenant on a real pool: one tenant's own caps, changed live, and the usage it is shown."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from pool_support import SCRIPT, run

from coordinator import Pool, PoolConfig, TenantQuotas
from coordinator.errors import (
    CpuQuotaExceeded,
    ScriptQuotaExceeded,
    ScriptTimeout,
    TooManyCallsInFlight,
    TooManyCallsQueued,
)

NAPPER = "fn initialize(config) { #{} }\nfn nap(s, v) { sleep(s); v }"


async def until(condition: Callable[[], bool], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.01)


def test_one_tenant_capped_another_not() -> None:
    async def scenario() -> None:
        async with Pool(PoolConfig(workers=1, spares=0)) as pool:
            pool.set_tenant_quotas(TenantQuotas(), {"capped": TenantQuotas(max_calls=1)})
            handle = await pool.load(NAPPER, name="n.rhai", kind="provider", tenant="capped")
            held = asyncio.ensure_future(pool.call(handle, "nap", 1.0, "held", tenant="capped"))
            await until(lambda: pool.tenant_usage("capped").calls == 1)
            with pytest.raises(TooManyCallsInFlight) as info:
                await pool.call(handle, "nap", 0, "second", tenant="capped")
            assert (info.value.tenant, info.value.quota, info.value.limit) == ("capped", "calls_in_flight", 1)
            assert "max_calls" in str(info.value)  # the message names the config key
            free = [pool.call(handle, "nap", 0.2, i, tenant="free") for i in range(4)]
            assert await asyncio.gather(*free) == [0, 1, 2, 3]  # the default has no cap
            assert await held == "held"
            assert (
                pool.tenant_quotas("capped").max_calls == 1 and pool.tenant_quotas("free").max_calls is None
            )

    run(scenario())


def test_a_change_applies_to_the_next_call_and_running_calls_are_not_cut() -> None:
    async def scenario() -> None:
        async with Pool(PoolConfig(workers=1, spares=0, tenant_max_queued=5)) as pool:
            assert pool.tenant_quotas("a") == TenantQuotas(max_queued=5)  # PoolConfig: the initial default
            handle = await pool.load(NAPPER, name="n.rhai", kind="provider", tenant="a")
            running = [asyncio.ensure_future(pool.call(handle, "nap", 1.0, i, tenant="a")) for i in range(2)]
            await until(lambda: pool.tenant_usage("a").inflight == 2)
            pool.set_tenant_quotas(TenantQuotas(max_calls=2), {})  # lowered to what "a" holds
            with pytest.raises(TooManyCallsInFlight):
                await pool.call(handle, "nap", 0, "next", tenant="a")
            assert await asyncio.gather(*running) == [0, 1]  # not cut
            assert await pool.call(handle, "nap", 0, "room", tenant="a") == "room"
            pool.set_tenant_quotas(TenantQuotas(), {"a": TenantQuotas(max_calls=0)})
            with pytest.raises(TooManyCallsInFlight):
                await pool.call(handle, "nap", 0, "none", tenant="a")
            assert await pool.call(handle, "nap", 0, "b", tenant="b") == "b"
            pool.set_tenant_quotas(TenantQuotas(), {})  # "a" left out: the default again
            assert await pool.call(handle, "nap", 0, "back", tenant="a") == "back"

    run(scenario())


def test_a_raised_inflight_cap_places_the_calls_it_held_back_at_once() -> None:
    async def scenario() -> None:
        async with Pool(PoolConfig(workers=1, spares=0)) as pool:
            pool.set_tenant_quotas(TenantQuotas(), {"a": TenantQuotas(max_inflight=1)})
            handle = await pool.load(NAPPER, name="n.rhai", kind="provider", tenant="a")
            calls = [asyncio.ensure_future(pool.call(handle, "nap", 1.0, i, tenant="a")) for i in range(3)]
            await until(lambda: pool.tenant_usage("a").calls == 3)
            usage = pool.tenant_usage("a")
            assert (usage.calls, usage.inflight, usage.queued) == (3, 1, 2)
            pool.set_tenant_quotas(TenantQuotas(), {"a": TenantQuotas(max_inflight=None)})
            usage = pool.tenant_usage("a")
            assert (usage.inflight, usage.queued) == (3, 0)  # placed by the change itself
            assert await asyncio.gather(*calls) == [0, 1, 2]
            usage = pool.tenant_usage("a")
            assert (usage.calls, usage.inflight, usage.queued) == (0, 0, 0)

    run(scenario())


def test_a_lowered_queue_cap_refuses_the_next_queued_call() -> None:
    async def scenario() -> None:
        async with Pool(PoolConfig(workers=1, spares=0, region_pipeline=1)) as pool:
            handle = await pool.load(SCRIPT, name="s.rhai", tenant="a")
            running = asyncio.ensure_future(pool.call(handle, "sleepy", 0.6, "runs", tenant="a"))
            waiting = [asyncio.ensure_future(pool.call(handle, "sleepy", 0, i, tenant="a")) for i in range(2)]
            await until(lambda: pool.tenant_usage("a").queued == 2)
            pool.set_tenant_quotas(TenantQuotas(), {"a": TenantQuotas(max_queued=2)})
            with pytest.raises(TooManyCallsQueued) as info:
                await pool.call(handle, "add", 1, 2, tenant="a")
            assert (info.value.quota, info.value.limit) == ("calls_queued", 2)
            assert await asyncio.gather(running, *waiting) == ["runs", 0, 1]

    run(scenario())


def test_cpu_quota_of_one_tenant_and_its_usage() -> None:
    """An inline call that ran into its deadline is charged its whole timeout (as without overrides)."""

    async def scenario() -> None:
        async with Pool(PoolConfig(workers=1, spares=1)) as pool:
            pool.set_tenant_quotas(TenantQuotas(), {"hog": TenantQuotas(cpu_seconds_per_minute=0.2)})
            assert pool.tenant_usage("hog").cpu_seconds == 0.0
            handle = await pool.load(SCRIPT, name="s.rhai", tenant="hog")
            with pytest.raises(ScriptTimeout):
                await pool.call(handle, "sleepy", 5.0, "late", tenant="hog", timeout=0.3)
            with pytest.raises(CpuQuotaExceeded) as info:
                await pool.call(handle, "add", 1, 2, tenant="hog")
            assert info.value.limit == 0.2 and "cpu_seconds_per_minute" in str(info.value)
            used = pool.tenant_usage("hog").cpu_seconds
            assert used is not None and used >= 0.3
            assert await pool.call(handle, "add", 1, 2, tenant="quiet") == 3
            assert pool.tenant_usage("quiet").cpu_seconds is None  # no quota: nothing measured
            pool.set_tenant_quotas(TenantQuotas(), {"hog": TenantQuotas(cpu_seconds_per_minute=60.0)})
            assert await pool.call(handle, "add", 1, 2, tenant="hog") == 3  # raised: room at once

    run(scenario())


def test_loaded_script_quotas_per_tenant_lowered_live_and_the_usage() -> None:
    async def scenario() -> None:
        async with Pool(PoolConfig(workers=1, spares=0)) as pool:
            pool.set_tenant_quotas(TenantQuotas(), {"small": TenantQuotas(max_loaded_scripts=1)})
            sources = [f"fn f() {{ {n} }}" for n in range(3)]
            for n, source in enumerate(sources):
                await pool.load(source, name=f"s{n}.rhai", tenant="small")
                await pool.load(source, name=f"s{n}.rhai", tenant="big")
            small, big = pool.tenant_usage("small"), pool.tenant_usage("big")
            assert (small.loaded_scripts, small.loaded_script_bytes) == (1, len(sources[2]))
            assert (big.loaded_scripts, big.loaded_script_bytes) == (3, sum(map(len, sources)))
            nappers = [NAPPER + f"// {n}" for n in range(2)]
            handles = [await pool.load(s, name="n.rhai", kind="provider", tenant="big") for s in nappers]
            held = [asyncio.ensure_future(pool.call(h, "nap", 1.0, 0, tenant="big")) for h in handles]
            await until(lambda: pool.tenant_usage("big").inflight == 2)
            pool.set_tenant_quotas(TenantQuotas(), {"big": TenantQuotas(max_loaded_scripts=2)})
            assert pool.tenant_usage("big").loaded_scripts == 2  # the idle ones forgotten at once
            with pytest.raises(ScriptQuotaExceeded, match="max_loaded_scripts") as info:
                await pool.load(
                    "fn g() { 2 }", name="g.rhai", tenant="big"
                )  # the two left have calls running
            assert (info.value.quota, info.value.limit) == ("scripts", 2)
            assert pool.tenant_usage("big").loaded_scripts == 2
            await asyncio.gather(*held)
            pool.set_tenant_quotas(TenantQuotas(), {"big": TenantQuotas(max_loaded_script_bytes=10)})
            with pytest.raises(ScriptQuotaExceeded, match="max_loaded_script_bytes"):
                await pool.load("fn g() { 2 }", name="g.rhai", tenant="big")
            assert await pool.load("fn g() { 2 }", name="g.rhai", tenant="small")  # its own quota

    run(scenario())


def test_bad_quotas_are_refused_and_change_nothing() -> None:
    for bad in (
        {"max_calls": -1},
        {"max_inflight": True},
        {"max_queued": 1.5},
        {"cpu_seconds_per_minute": -1.0},
    ):
        with pytest.raises(ValueError, match=next(iter(bad))):
            TenantQuotas(**bad)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="cpu_seconds_per_minute"):
        TenantQuotas(cpu_seconds_per_minute=float("nan"))

    async def scenario() -> None:
        async with Pool(PoolConfig(workers=1, spares=0, tenant_max_calls=3)) as pool:
            with pytest.raises(TypeError):
                pool.set_tenant_quotas(TenantQuotas(), {"a": {"max_calls": 1}})  # type: ignore[dict-item]
            with pytest.raises(TypeError):
                pool.set_tenant_quotas(None, {})  # type: ignore[arg-type]
            assert pool.tenant_quotas("a").max_calls == 3

    run(scenario())
