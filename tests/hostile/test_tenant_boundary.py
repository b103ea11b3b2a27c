"""Tenants as a boundary (issue 10): crashes, evasion and floods of one tenant against a quiet one."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest
from pool_support import run

from coordinator._core.config import Limits, PoolConfig, RetryPolicy
from coordinator._core.pool import Pool
from coordinator.errors import LimitExceeded, Quarantined

KILLER = """
fn render(ctx) { 0 }
fn bomb() {
    let m = #{}; let s = "y"; while s.len < 500000 { s += s; }
    let i = 0; loop { m[s + i.to_string()] = i; i += 1; }
}
"""
"""A region script (its calls run inline, so a worker thrashing on memory is not mistaken for a hung
one): the bomb outgrows the worker's address space and the death is blamed on it."""
NAPPER = "fn initialize(config) { #{} }\nfn nap(s, v) { sleep(s); v }"


def config(**options: Any) -> PoolConfig:
    base: dict[str, Any] = {
        "workers": 1,
        "spares": 1,
        "limits": Limits(memory_bytes=512 << 20),
        "retry": RetryPolicy(strikes=2, window=60.0, quarantine=30.0),
    }
    return PoolConfig(**(base | options))


def test_editing_the_script_does_not_reset_the_tenants_strikes() -> None:
    """Issue 10: appending ``// variant N`` to each copy evaded the sha256-keyed breaker completely."""

    async def scenario() -> None:
        async with Pool(config()) as pool:
            quiet = await pool.load(NAPPER, name="quiet.rhai", kind="provider", tenant="quiet")
            innocent = await pool.load(
                NAPPER + "\n// new", name="new.rhai", kind="provider", tenant="attacker"
            )
            for n in range(4):  # strikes=2 per script: each variant alone would never be quarantined
                variant = await pool.load(KILLER + f"// variant {n}", name=f"v{n}.rhai", tenant="attacker")
                with pytest.raises(LimitExceeded):
                    await pool.call(variant, "bomb", tenant="attacker", timeout=30)
                assert await pool.call(quiet, "nap", 0, n, tenant="quiet") == n
            with pytest.raises(Quarantined, match="attacker"):
                await pool.call(innocent, "nap", 0, 1, tenant="attacker")
            assert await pool.call(innocent, "nap", 0, 7, tenant="quiet") == 7  # same script, other tenant

    run(scenario(), timeout=120)


def test_after_a_crash_the_offender_never_shares_a_worker_with_another_tenant() -> None:
    async def scenario() -> None:
        async with Pool(config(workers=2)) as pool:
            killer = await pool.load(KILLER, name="killer.rhai", tenant="attacker")
            napper = await pool.load(NAPPER, name="attacker.rhai", kind="provider", tenant="attacker")
            quiet = await pool.load(NAPPER, name="quiet.rhai", kind="provider", tenant="quiet")
            with pytest.raises(LimitExceeded):
                await pool.call(killer, "bomb", tenant="attacker", timeout=30)
            shared = 0

            async def watch() -> None:
                nonlocal shared
                while True:
                    for info in pool.workers():
                        names = {r.split(":")[0] for r in info.running}
                        shared += names >= {"attacker.rhai", "quiet.rhai"}
                    await asyncio.sleep(0.002)

            watcher = asyncio.ensure_future(watch())
            calls = [pool.call(napper, "nap", 0.05, i, tenant="attacker", timeout=20) for i in range(6)]
            calls += [pool.call(quiet, "nap", 0.05, i, tenant="quiet", timeout=20) for i in range(6)]
            assert await asyncio.gather(*calls) == list(range(6)) * 2
            watcher.cancel()
            assert shared == 0

    run(scenario(), timeout=120)


def test_a_flood_of_one_tenant_leaves_room_for_another() -> None:
    """Issue 10: with one tenant sending 300 inferences, another's single one failed after 13 s.
    A time bound is the behaviour here; it is generous (the flood needs 300 × 0.1 s / 8 ≈ 4 s)."""

    async def scenario() -> None:
        async with Pool(config(provider_capacity=8)) as pool:
            flood = await pool.load(NAPPER, name="flood.rhai", kind="provider", tenant="flood")
            quiet = await pool.load(NAPPER, name="quiet.rhai", kind="provider", tenant="quiet")
            flooding = [
                asyncio.ensure_future(pool.call(flood, "nap", 0.1, i, tenant="flood", timeout=60))
                for i in range(300)
            ]
            await asyncio.sleep(0.3)
            started = time.monotonic()
            assert await pool.call(quiet, "nap", 0, "served", tenant="quiet", timeout=10) == "served"
            assert time.monotonic() - started < 1.0
            assert len(await asyncio.gather(*flooding)) == 300

    run(scenario(), timeout=120)
