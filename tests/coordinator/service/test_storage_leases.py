"""Tenant leases between coordinators sharing one database (both engines; PostgreSQL on a real server).

A tenant has one owner at a time: another coordinator takes the lease only after it expired, the epoch
grows at every change of owner, and every write of a tenant is fenced by the epoch its writer holds in
the same transaction, so a coordinator that lost the tenant (paused past its lease) has its write
refused, writes nothing, and drops the tenant.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from postgres_server import PostgresServer

from coordinator.service.errors import StorageFailed
from coordinator.service.storage import Storage
from coordinator.service.storage_backends import Db

Opener = Callable[..., Storage]
SECS = 1.0  # a short lease: the tests wait it out


@pytest.fixture(params=["sqlite", "postgresql"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens coordinators' Storage on one database of the engine, each with its own owner id."""
    where: Path | str
    if request.param == "sqlite":
        where = tmp_path / "rhaipool.db"
    else:
        server: PostgresServer = request.getfixturevalue("postgres")
        where = server.fresh()
    opened: list[Storage] = []

    def open_(owner: str, lease_secs: float = SECS) -> Storage:
        storage = Storage(where, owner=owner, lease_secs=lease_secs)
        opened.append(storage)
        return storage

    yield open_
    for storage in opened:
        storage.close()


def test_the_lease_moves_only_after_it_expired(opener: Opener) -> None:
    secs = 1.5  # renewed every 0.4 s below: a loaded machine may delay one by a second and no more
    a, b = opener("a", lease_secs=secs), opener("b", lease_secs=secs)

    async def go() -> None:
        first = await a.acquire("acme")
        assert (first.owner, first.epoch, first.mine) == ("a", 1, True) and a.holds("acme")
        refused = await b.acquire("acme")
        assert (refused.owner, refused.epoch, refused.mine) == ("a", 1, False) and not b.holds("acme")
        for _ in range(5):  # a renews: b still cannot take it, past the first lease's length
            await asyncio.sleep(0.4)
            assert await a.renew() == []
            assert not (await b.acquire("acme")).mine
        assert a.holds("acme")
        await asyncio.sleep(secs * 1.3)  # a stops renewing (paused): the lease runs out
        assert not a.holds("acme")  # a stops serving on its own clock before it expires
        taken = await b.acquire("acme")
        assert (taken.owner, taken.epoch, taken.mine) == ("b", 2, True) and b.holds("acme")
        lease = await a.lease("acme")
        assert lease is not None and (lease.owner, lease.epoch, lease.mine) == ("b", 2, False)

    asyncio.run(go())


def test_a_stale_owners_write_is_refused_and_it_drops_the_tenant(opener: Opener) -> None:
    a, b = opener("a"), opener("b")
    dropped: list[str] = []
    a.on_lost = dropped.append

    async def go() -> None:
        await a.acquire("acme")
        await a.acquire("globex")
        await a.create_region("acme", "log", "hook", 100, {}, [(1, {"content": "by a"})])
        await asyncio.sleep(SECS * 1.3)
        assert (await b.acquire("acme")).mine
        await b.change_entries("acme", "log", [], [(2, {"content": "by b"})])
        await b.put_script("acme", "region_hook", "hook", "b's")
        for write in (
            a.change_entries("acme", "log", [1], [(3, {"content": "stale"})], rewrite=True),
            a.put_script("acme", "region_hook", "hook", "a's"),
        ):
            with pytest.raises(StorageFailed) as refused:
                await write
            assert refused.value.status == 503
            assert "served by another coordinator" in str(refused.value.error)
        assert dropped == ["acme"] and a.epoch("acme") is None and not a.holds("acme")
        (row,) = b.load_regions("acme")
        assert not isinstance(row, str) and [e["content"] for e in row.entries] == ["by a", "by b"]
        script = await b.get_script("acme", "region_hook", "hook")
        assert script is not None and script.content == "b's"
        await a.put_script("globex", "region_hook", "hook", "still a's")  # a keeps the tenant it holds
        assert await a.renew() == []  # renewing globex (expired, but nobody took it) still works

    asyncio.run(go())


def test_a_renewal_finds_the_tenants_it_lost(opener: Opener) -> None:
    a, b = opener("a"), opener("b")
    dropped: list[str] = []
    a.on_lost = dropped.append

    async def go() -> None:
        await a.acquire("acme")
        await a.acquire("globex")
        await asyncio.sleep(SECS * 1.3)
        assert (await b.acquire("acme")).mine
        assert await a.renew() == ["acme"]
        assert dropped == ["acme"] and a.held() == ["globex"] and a.holds("globex")

    asyncio.run(go())


def test_a_take_over_waits_for_a_write_in_flight(opener: Opener) -> None:
    """The fence and the write are one transaction, the lease row locked by it: a coordinator taking the
    tenant meanwhile gets it only after the commit, and then sees the write."""
    a, b = opener("a"), opener("b")

    async def go() -> None:
        await a.acquire("acme")
        await asyncio.sleep(SECS * 1.3)  # expired, not yet taken: a may still write

        def slow(db: Db) -> None:
            db.execute("INSERT INTO scripts VALUES ('acme', 'region_hook', 'late', 'x', 'h', 0)")
            # The take-over arrives while this transaction is open (and idle for less than a lease:
            # one idle longer is ended by the server, see the frozen coordinator's test below).
            time.sleep(SECS * 0.6)

        writing = asyncio.ensure_future(a._change("acme", slow))
        await asyncio.sleep(0.3)
        taken = await b.acquire("acme")
        assert taken.mine and taken.epoch == 2
        assert await b.get_script("acme", "region_hook", "late") is not None  # committed before
        await writing

    asyncio.run(go())


def test_a_write_without_the_lease_is_refused_and_writes_nothing(opener: Opener) -> None:
    a = opener("a")
    with pytest.raises(StorageFailed, match="does not hold its lease"):
        asyncio.run(a.put_script("acme", "region_hook", "x", "y"))
    assert asyncio.run(opener("b").list_scripts("acme")) == []


def test_a_released_lease_is_taken_at_once_and_the_same_owner_moves_the_epoch(opener: Opener) -> None:
    a, b = opener("a", lease_secs=60.0), opener("b", lease_secs=60.0)

    async def go() -> None:
        await a.acquire("acme")
        assert not (await b.acquire("acme")).mine
        await a.release()
        assert a.held() == [] and not a.holds("acme")
        taken = await b.acquire("acme")
        assert taken.mine and taken.epoch == 2
        await b.release(["acme"])
        back = await b.acquire("acme")  # its own again: the epoch still grows, old writes stay refused
        assert back.mine and back.epoch == 3

    asyncio.run(go())


def test_purging_a_tenant_moves_its_lease(opener: Opener) -> None:
    a, b = opener("a", lease_secs=60.0), opener("b", lease_secs=60.0)
    dropped: list[str] = []
    a.on_lost = dropped.append

    async def go() -> None:
        await a.acquire("acme")
        await a.put_script("acme", "region_hook", "x", "y")
        await b.purge_tenant("acme")  # the admin API on another coordinator
        with pytest.raises(StorageFailed, match="served by another coordinator"):
            await a.put_script("acme", "region_hook", "x", "again")
        assert dropped == ["acme"] and await b.list_scripts("acme") == []

    asyncio.run(go())


def test_a_coordinator_frozen_inside_a_transaction_does_not_hold_its_tenants(
    postgres: PostgresServer,
) -> None:
    """A coordinator paused between two statements of a transaction (a SIGSTOP, a frozen VM) would
    hold its lease rows locked, so nobody could take its tenants until it came back: the server ends
    a transaction idle for longer than a lease, the lease moves, and the frozen one's write fails."""
    where = postgres.fresh()
    a, b = Storage(where, owner="a", lease_secs=SECS), Storage(where, owner="b", lease_secs=SECS)

    def frozen(db: Db) -> None:
        db.execute("SELECT 1 FROM leases WHERE tenant = 'acme' FOR UPDATE")  # as a renewal locks it
        time.sleep(3 * SECS)
        db.execute("UPDATE leases SET expires_at = expires_at WHERE tenant = 'acme'")

    async def go() -> None:
        assert (await a.acquire("acme")).mine
        stuck = asyncio.create_task(asyncio.to_thread(a.backend.run, frozen, transaction=True))
        await asyncio.sleep(0.2)
        begun = time.monotonic()
        while not (await b.acquire("acme")).mine:
            await asyncio.sleep(0.05)
        taken = time.monotonic() - begun
        assert taken < 2 * SECS, taken  # the lease ran out, the lock went with the transaction
        with pytest.raises(StorageFailed):
            await stuck

    try:
        asyncio.run(go())
    finally:
        a.close()
        b.close()
