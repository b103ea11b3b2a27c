"""Concurrent lookups of one provider version share one load, run by the callers' own tasks: a load
whose callers all gave up stops, and a load whose first caller gave up is finished by another."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pool_support import run

from coordinator._core.pool import Pool
from coordinator.egress import Egress
from coordinator.providers.config import parse_config
from coordinator.providers.executor import PoolExecutor
from coordinator.providers.runtime import ProviderRuntime

SLOW = (
    'fn initialize(config) { sleep(0.6); #{ v: 1 } }\nfn inference(state, request) { #{ content: "ok" } }\n'
)


async def in_flight(runtime: ProviderRuntime) -> None:
    for _ in range(2000):
        if runtime.loader._loading:
            return
        await asyncio.sleep(0.005)
    raise AssertionError("the load never started")


def test_a_load_whose_callers_all_gave_up_does_not_go_on(tmp_path: Path) -> None:
    (tmp_path / "p.rhai").write_text(SLOW)

    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool, Egress() as egress:
            runtime = ProviderRuntime(
                PoolExecutor(pool), egress, parse_config({"providers_dir": str(tmp_path)})
            )
            before = asyncio.all_tasks()
            caller = asyncio.ensure_future(runtime.get("p"))
            await in_flight(runtime)
            caller.cancel()
            with pytest.raises(asyncio.CancelledError):
                await caller
            assert asyncio.all_tasks() - before == set() and not runtime.loader._loading
            assert (await runtime.get("p")).name == "p"  # the next lookup loads it afresh

    run(scenario())


def test_a_load_whose_first_caller_gave_up_is_finished_for_the_others(tmp_path: Path) -> None:
    (tmp_path / "p.rhai").write_text(SLOW)

    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool, Egress() as egress:
            runtime = ProviderRuntime(
                PoolExecutor(pool), egress, parse_config({"providers_dir": str(tmp_path)})
            )
            first = asyncio.ensure_future(runtime.get("p"))
            await in_flight(runtime)
            others = [asyncio.ensure_future(runtime.get("p")) for _ in range(5)]
            await asyncio.sleep(0)  # the others are waiting on the shared load
            first.cancel()
            loaded = await asyncio.gather(*others)
            assert first.cancelled() and len({id(p) for p in loaded}) == 1
            assert not runtime.loader._loading

    run(scenario())
