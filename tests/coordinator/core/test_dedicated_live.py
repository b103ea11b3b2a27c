"""Dedicated workers changed while the pool runs: workers move once drained, and no call is failed."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest
from pool_support import SCRIPT, run

from coordinator import Pool, PoolConfig
from coordinator._core.dedicated import Owners
from coordinator.errors import PoolClosed

NAPPER = "fn initialize(config) { #{} }\nfn nap(s, v) { sleep(s); v }"


async def until(condition: Callable[[], bool], timeout: float = 20.0) -> None:
    async with asyncio.timeout(timeout):
        while not condition():
            await asyncio.sleep(0.005)


def owners_of(pool: Pool) -> dict[str, str | None]:
    return {w.id: w.dedicated_to for w in pool.workers() if w.state == "active"}


def owners_sorted(pool: Pool) -> list[str]:
    """The ACTIVE workers' owners, ``-`` for a shared one."""
    return sorted(owner or "-" for owner in owners_of(pool).values())


def test_owners_drain_a_busy_worker_before_it_moves_and_release_an_idle_one_at_once() -> None:
    owners = Owners({}, workers=3)
    assert [owners.assign(i) for i in (b"a", b"b", b"c")] == [None, None, None]
    owners.replace({"vip": 1}, {})
    owners.settle(idle=set(), busy=[b"a", b"b", b"c"])  # nobody idle: the least loaded is drained
    assert owners.pending and owners.owner(b"a") not in (None, "vip") and owners.owner(b"b") is None
    owners.settle(idle={b"b"}, busy=[b"a", b"c"])  # one idle before the drained one: it goes at once
    assert owners.owner(b"b") == "vip" and owners.owner(b"a") not in (None, "vip") and owners.pending
    owners.settle(idle={b"a"}, busy=[b"b", b"c"])  # drained, no longer wanted: shared again
    assert owners.owner(b"a") is None and owners.owner(b"b") == "vip" and not owners.pending
    owners.replace({"vip": 1}, {})  # the same again: nothing moves
    owners.settle(idle={b"a", b"b", b"c"}, busy=[])
    assert [owners.owner(i) for i in (b"a", b"b", b"c")] == [None, "vip", None]
    owners.replace({}, {})
    owners.settle(idle=set(), busy=[b"a", b"b", b"c"])
    assert owners.owner(b"b") is None
    owners.replace({"vip": 1}, {})
    owners.settle(idle={b"c"}, busy=[b"a", b"b"])
    assert owners.owner(b"c") == "vip" and not owners.pending
    owners.replace({}, {})
    owners.settle(idle={b"a", b"b", b"c"}, busy=[])
    owners.replace({"vip": 1}, {})
    owners.settle(idle=set(), busy=[b"a", b"b", b"c"])
    owners.settle(idle={b"a"}, busy=[b"b", b"c"])
    assert owners.owner(b"a") == "vip" and not owners.pending  # the drained one, once idle
    owners.replace({"gold": 1}, {})  # vip is no longer dedicated: shared at once, even busy
    owners.settle(idle={b"b"}, busy=[b"a", b"c"])
    assert owners.owner(b"a") is None and owners.owner(b"b") == "gold" and not owners.pending
    owners.replace({"gold": 1, "vip": 1}, {})
    owners.settle(idle=set(), busy=[b"a", b"b", b"c"])
    assert owners.owner(b"b") == "gold" and owners.pending  # gold keeps its worker, busy or not
    with pytest.raises(ValueError, match="shared worker"):
        owners.replace({"gold": 2, "vip": 1}, {})
    with pytest.raises(ValueError, match="without dedicated_workers"):
        owners.replace({"gold": 1}, {"vip": "g"})
    assert owners.dedicated("vip") and owners.wanted() == ({"gold": 1, "vip": 1}, {})  # unchanged


def test_a_tenant_made_dedicated_live_gets_a_drained_worker_and_no_call_fails() -> None:
    async def scenario() -> None:
        async with Pool(PoolConfig(workers=3, spares=0, region_pipeline=1)) as pool:
            other = await pool.load(SCRIPT, name="other.rhai", tenant="other")
            vip = await pool.load(NAPPER + "// vip", name="vip.rhai", kind="provider", tenant="vip")
            together: list[set[str]] = []

            async def watch() -> None:
                while True:
                    for info in pool.workers():
                        names = {r.split(":")[0] for r in info.running}
                        if {"vip.rhai", "other.rhai"} <= names:
                            together.append(names)
                    await asyncio.sleep(0.002)

            watcher = asyncio.ensure_future(watch())
            first = [
                asyncio.ensure_future(pool.call(other, "sleepy", 1.0, i, tenant="other")) for i in range(3)
            ]
            await until(lambda: all(w.inflight == 1 for w in pool.workers()))  # every worker busy
            pool.set_dedicated({"vip": 1}, {})
            assert pool.dedicated() == ({"vip": 1}, {})
            assert list(owners_of(pool).values()) == [None, None, None]  # none idle: one is drained
            vip_calls = [asyncio.ensure_future(pool.call(vip, "nap", 0.1, i, tenant="vip")) for i in range(4)]
            more = [
                asyncio.ensure_future(pool.call(other, "sleepy", 0.2, i, tenant="other")) for i in range(6)
            ]
            assert await asyncio.gather(*more) == list(range(6))  # the other workers keep serving
            assert await asyncio.gather(*vip_calls) == list(range(4))
            assert await asyncio.gather(*first) == list(range(3))
            assert owners_sorted(pool) == ["-", "-", "vip"]
            vip_worker = next(w for w, owner in owners_of(pool).items() if owner == "vip")
            later = [pool.call(other, "sleepy", 0.05, i, tenant="other") for i in range(12)]
            assert await asyncio.gather(*later) == list(range(12))
            watcher.cancel()
            assert not together  # never one process for both
            assert pool.statistics().calls_failed == 0
            assert owners_of(pool)[vip_worker] == "vip"

            pool.set_dedicated({}, {})  # no longer dedicated: its worker is shared at once
            assert list(owners_of(pool).values()) == [None, None, None]
            assert await asyncio.gather(*(pool.call(vip, "nap", 0, i, tenant="vip") for i in range(3)))

    run(scenario(), timeout=120)


def test_an_idle_worker_moves_between_tenants_at_once_and_bad_groups_change_nothing() -> None:
    async def scenario() -> None:
        async with Pool(PoolConfig(workers=2, spares=0, dedicated_workers={"vip": 1})) as pool:
            handle = await pool.load(NAPPER, name="n.rhai", kind="provider", tenant="gold")
            assert owners_sorted(pool) == ["-", "vip"]
            pool.set_dedicated({"gold": 1}, {})
            assert owners_sorted(pool) == ["-", "gold"]
            gold = next(w for w, owner in owners_of(pool).items() if owner == "gold")
            running = asyncio.ensure_future(pool.call(handle, "nap", 0.5, "gold", tenant="gold"))
            await until(lambda: any(w.inflight for w in pool.workers()))
            assert [w.id for w in pool.workers() if w.inflight] == [gold]  # gold's call on gold's worker
            assert await running == "gold"
            for workers, groups in (({"gold": 2}, {}), ({"gold": 0}, {}), ({"gold": 1}, {"vip": "g"})):
                with pytest.raises(ValueError):
                    pool.set_dedicated(workers, groups)
            assert pool.dedicated() == ({"gold": 1}, {})
            assert owners_sorted(pool) == ["-", "gold"]
        with pytest.raises(PoolClosed):
            pool.set_dedicated({}, {})

    run(scenario())


def test_a_tenant_pinned_live_takes_workers_of_its_node_group_only() -> None:
    owners = Owners({}, workers=1)
    assert [owners.assign(b"local"), owners.assign(b"g1", "g"), owners.assign(b"h1", "h")] == [None] * 3
    owners.replace({"acme": 1}, {"acme": "g"})
    owners.settle(idle={b"local", b"g1", b"h1"}, busy=[])
    assert [owners.owner(i) for i in (b"local", b"g1", b"h1")] == [None, "acme", None]
    owners.replace({"acme": 1}, {"acme": "x"})  # a group with no node yet: acme waits for one
    owners.settle(idle={b"local", b"h1"}, busy=[b"g1"])
    assert owners.owner(b"g1") not in (None, "acme") and owners.pending  # drained before it is shared
    owners.settle(idle={b"local", b"g1", b"h1"}, busy=[])
    assert [owners.owner(i) for i in (b"local", b"g1", b"h1")] == [None, None, None] and not owners.pending
    assert owners.assign(b"x1", "x") == "acme"
