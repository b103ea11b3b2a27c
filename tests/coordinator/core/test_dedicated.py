"""Dedicated worker groups: a tenant's own workers, which nobody else's call ever shares."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from pool_support import SCRIPT, run

from coordinator._core.config import Limits, PoolConfig
from coordinator._core.dedicated import Owners
from coordinator._core.pool import Pool
from coordinator.errors import LimitExceeded

PROVIDER = "fn initialize(config) { #{} }\nfn fetch(url) { http_get(url) }"


def test_owners_fill_each_group_then_share_and_refill_after_a_loss() -> None:
    owners = Owners({"vip": 2, "gold": 1}, workers=4)
    assert [owners.assign(i) for i in (b"a", b"b", b"c", b"d")] == ["vip", "vip", "gold", None]
    assert owners.assign(b"a") == "vip"  # idempotent
    owners.release(b"b")
    assert owners.assign(b"e") == "vip" and owners.owner(b"d") is None
    assert owners.dedicated("gold") and not owners.dedicated("other")
    with pytest.raises(ValueError, match="shared worker"):
        Owners({"vip": 2}, workers=2)
    with pytest.raises(ValueError, match="at least 1"):
        Owners({"vip": 0}, workers=2)


class SlowHost:
    """A host handler whose HTTP answers take a while (so the calls cannot be re-run once sent)."""

    sent = False

    def begin_attempt(self, spawn: object) -> None:
        pass

    async def call(self, name: str, args: list[Any]) -> Any:
        self.sent = True
        await asyncio.sleep(0.2)
        return {"status": 200, "body": args[0]}

    async def stream(self, name: str, args: list[Any]) -> Any:  # pragma: no cover - never asked
        yield None


def test_a_crash_on_the_shared_workers_never_reaches_a_dedicated_tenant() -> None:
    async def scenario() -> None:
        config = PoolConfig(
            workers=2, spares=1, dedicated_workers={"vip": 1}, limits=Limits(memory_bytes=512 << 20)
        )
        async with Pool(config) as pool:
            vip = await pool.load(PROVIDER, name="vip.rhai", kind="provider", tenant="vip")
            bomb = await pool.load(SCRIPT, name="bomb.rhai", tenant="attacker")
            seen: dict[str, set[int]] = {"vip.rhai": set(), "bomb.rhai": set()}

            async def watch() -> None:
                while True:
                    for info in pool.workers():
                        for name in {r.split(":")[0] for r in info.running} & seen.keys():
                            seen[name].add(info.pid)
                    await asyncio.sleep(0.002)

            watcher = asyncio.ensure_future(watch())
            calls = [pool.call(vip, "fetch", f"u{i}", tenant="vip", host=SlowHost()) for i in range(20)]
            vip_calls = asyncio.gather(*calls)
            for _ in range(2):
                with pytest.raises(LimitExceeded):
                    await pool.call(bomb, "keys_bomb", tenant="attacker", timeout=30)
            values = await vip_calls  # none lost, though they had sent their HTTP requests
            watcher.cancel()
            assert [v["body"] for v in values] == [f"u{i}" for i in range(20)]
            assert len(seen["vip.rhai"]) == 1 and not seen["vip.rhai"] & seen["bomb.rhai"]
            assert pool.statistics().exits >= 2

    run(scenario(), timeout=120)
