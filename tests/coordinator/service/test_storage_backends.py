"""Storage on both engines: every statement the service runs gives the same answers on SQLite and on a
real PostgreSQL server (``tests/support/postgres_server.py``); migrations apply once and a newer
database is refused; a change that cannot commit changes nothing; PostgreSQL's lost connection is a
503 and the next call reconnects.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from postgres_server import PostgresServer

from coordinator.service.errors import ServiceConfigError, StorageFailed
from coordinator.service.storage import DROPPED, IDEMPOTENCY_ROW_BYTES, MIGRATIONS, Storage
from coordinator.service.storage_backends import redacted_url

Opener = Callable[..., Storage]


@pytest.fixture(params=["sqlite", "postgresql"])
def opener(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Opener]:
    """Opens Storage instances on one database of the engine (each closed at the end)."""
    where: Path | str
    if request.param == "sqlite":
        where = tmp_path / "state" / "rhaipool.db"
    else:
        server: PostgresServer = request.getfixturevalue("postgres")
        where = server.fresh()
    opened: list[Storage] = []

    def open_(**kwargs: object) -> Storage:
        storage = Storage(where, **kwargs)  # type: ignore[arg-type]
        opened.append(storage)
        return storage

    yield open_
    for storage in opened:
        storage.close()


def test_scripts_round_trip(opener: Opener) -> None:
    s = opener()

    async def go() -> None:
        first = await s.put_script("acme", "region_hook", "log", "fn render(ctx) { 1 }")
        again = await s.put_script("acme", "region_hook", "log", "// é\nfn render(ctx) { 2 }")
        await s.put_script("acme", "provider", "echo", "fn x() {}")
        await s.put_script("globex", "region_hook", "log", "other")
        assert again.updated_at >= first.updated_at
        got = await s.get_script("acme", "region_hook", "log")
        assert got == again and got.content.startswith("// é")
        assert await s.get_script("acme", "region_hook", "nothing") is None
        assert [(r.kind, r.name) for r in await s.list_scripts("acme")] == [
            ("provider", "echo"),
            ("region_hook", "log"),
        ]
        stamps = {(t, k, n): st for t, k, n, st in s.script_stamps()}
        assert stamps[("acme", "region_hook", "log")].size == len(again.content.encode())  # bytes, not chars
        assert stamps[("acme", "region_hook", "log")].sha256 == again.sha256
        assert await s.delete_script("acme", "provider", "echo") is True
        assert await s.delete_script("acme", "provider", "echo") is False
        assert [r.name for r in await s.list_scripts("acme")] == ["log"]

    asyncio.run(go())


def test_regions_round_trip(opener: Opener) -> None:
    s = opener()

    async def go() -> None:
        await s.create_region("acme", "log", "hook", 1000, {"policy": "fifo"}, [(1, {"content": "a"})])
        await s.change_entries("acme", "log", [], [(2, {"content": "b"}), (3, {"content": "c"})])
        await s.change_entries("acme", "log", [1], [(4, {"content": "d"})])
        (row,) = s.load_regions("acme")
        assert not isinstance(row, str)
        assert (row.name, row.script, row.budget, row.options) == ("log", "hook", 1000, {"policy": "fifo"})
        assert [e["content"] for e in row.entries] == ["b", "c", "d"] and row.seqs == [2, 3, 4]
        await s.change_entries("acme", "log", [], [(9, {"content": "only"})], rewrite=True)
        (row,) = s.load_regions("acme")
        assert not isinstance(row, str) and row.seqs == [9]
        await s.create_region("acme", "log", "hook2", 5, {})  # created again: empty, new script
        (row,) = s.load_regions("acme")
        assert not isinstance(row, str) and (row.script, row.budget, row.entries) == ("hook2", 5, [])
        await s.create_region("globex", "x", "hook", 1, {})
        assert s.region_tenants() == ["acme", "globex"]
        assert await s.delete_region("acme", "log") is True
        assert await s.delete_region("acme", "log") is False
        assert s.load_regions("acme") == []

    asyncio.run(go())


def test_a_change_that_cannot_commit_changes_nothing(opener: Opener) -> None:
    s = opener()

    async def go() -> None:
        await s.create_region("acme", "log", "hook", 1000, {}, [(1, {"content": "a"})])
        with pytest.raises(StorageFailed) as failed:  # seq 1 is taken: the whole transaction rolls back
            await s.change_entries("acme", "log", [], [(5, {"content": "new"}), (1, {"content": "dup"})])
        assert failed.value.status == 503 and "nothing changed" in str(failed.value.error)
        (row,) = s.load_regions("acme")
        assert not isinstance(row, str) and row.seqs == [1] and row.entries == [{"content": "a"}]
        await s.change_entries("acme", "log", [], [(2, {"content": "b"})])  # the connection still works
        (row,) = s.load_regions("acme")
        assert not isinstance(row, str) and row.seqs == [1, 2]

    asyncio.run(go())


def test_provider_state_tables_and_tenants(opener: Opener) -> None:
    s = opener()

    async def go() -> None:
        assert await s.provider_state("acme", "echo") is None
        await s.save_provider_state("acme", "echo", {"model": "m", "n": 1})
        await s.save_provider_state("acme", "echo", {"model": "m2"})
        assert await s.provider_state("acme", "echo") == {"model": "m2"}
        await s.put_provider_table("acme", "openai", "sealed-1")
        await s.put_provider_table("acme", "openai", "sealed-2")
        assert s.provider_tables() == [("acme", "openai", "sealed-2")]
        assert await s.delete_provider_table("acme", "openai") is True
        assert await s.delete_provider_table("acme", "openai") is False
        await s.put_tenant("t1", "h1")
        await s.put_tenant("t2", "h2")
        assert await s.revoke_tenant("t1", 123.5) is True
        assert await s.revoke_tenant("t1", 124.0) is False
        assert [(r.id, r.revoked_at) for r in s.tenants()] == [("t1", 123.5), ("t2", None)]
        await s.put_tenant("t1", "h1b")  # reinstated with a new token
        assert next((r.id, r.token_sha256, r.revoked_at) for r in s.tenants()) == ("t1", "h1b", None)
        assert s.forget_tenant_rows(["t2", "nobody"]) == ["t2"]
        await s.put_script("t1", "provider", "p", "x")
        await s.create_region("t1", "r", "h", 1, {}, [(1, {})])
        await s.purge_tenant("t1")
        assert s.tenants() == [] and await s.list_scripts("t1") == [] and s.load_regions("t1") == []

    asyncio.run(go())


def test_idempotency_keys(opener: Opener) -> None:
    s = opener()

    async def go() -> None:
        for caller in ("acme", "\x00admin"):  # the admin's slot holds a NUL in memory
            assert await s.idempotent_answer(caller, "k") is None
            assert await s.claim_idempotency_key(caller, "k", "req", 0.0) is True
            assert await s.claim_idempotency_key(caller, "k", "req", 0.0) is False
            assert await s.idempotent_answer(caller, "k") == ("req", 0, "[]", b"")
            await s.save_idempotent_answer(caller, "k", 200, '[["a", "b"]]', b"\x00body", 1 << 20)
            assert await s.idempotent_answer(caller, "k") == ("req", 200, '[["a", "b"]]', b"\x00body")
            await s.release_idempotency_key(caller, "k")  # answered: kept
            assert await s.idempotent_answer(caller, "k") is not None
        assert await s.claim_idempotency_key("acme", "k2", "req", 0.0) is True
        await s.release_idempotency_key("acme", "k2")  # unanswered: forgotten, a retry runs
        assert await s.claim_idempotency_key("acme", "k2", "req", 0.0) is True
        assert await s.claim_idempotency_key("acme", "k3", "req", 1e12) is True  # all older keys expire
        assert await s.idempotent_answer("acme", "k") is None
        assert await s.idempotent_answer("\x00admin", "k") is None

    asyncio.run(go())


def test_kept_answers_stay_within_the_callers_bytes_oldest_bodies_first(opener: Opener) -> None:
    """Past the limit the oldest answers lose their bodies (``DROPPED``: the key still refuses a second
    run), then the oldest keys go; another caller's keys are untouched; an answer over the limit by
    itself is kept without its body."""
    s = opener()
    row = IDEMPOTENCY_ROW_BYTES
    limit = 3 * (1000 + 2 + 1 + row) + 2 * (2 + 1 + row) + 40  # three answers kept, two keys without theirs

    async def go() -> None:
        assert await s.claim_idempotency_key("other", "k0", "r", 0.0)
        await s.save_idempotent_answer("other", "k0", 200, "[]", b"o" * 1000, limit)
        for i in range(5):
            assert await s.claim_idempotency_key("acme", f"k{i}", "r", 0.0)
            await s.save_idempotent_answer("acme", f"k{i}", 200, "[]", bytes([65 + i]) * 1000, limit)
        kept = [await s.idempotent_answer("acme", f"k{i}") for i in range(5)]
        assert [k is not None and k[3] != b"" for k in kept] == [False, False, True, True, True], kept
        assert kept[0] == ("r", 200, DROPPED, b"") and kept[1] == ("r", 200, DROPPED, b"")
        assert await s.idempotent_answer("other", "k0") == ("r", 200, "[]", b"o" * 1000)
        for i in range(5, 40):  # bodiless keys alone past the limit: the oldest are forgotten
            assert await s.claim_idempotency_key("acme", f"k{i}", "r", 0.0)
            await s.save_idempotent_answer("acme", f"k{i}", 201, "[]", b"", limit)
        assert await s.idempotent_answer("acme", "k0") is None
        assert await s.idempotent_answer("acme", "k39") == ("r", 201, "[]", b"")
        assert await s.claim_idempotency_key("acme", "big", "r", 0.0)
        await s.save_idempotent_answer("acme", "big", 200, '[["a", "b"]]', b"x" * (2 * limit), limit)
        assert await s.idempotent_answer("acme", "big") == ("r", 200, DROPPED, b"")

    asyncio.run(go())


def test_what_was_committed_is_there_after_reopening(opener: Opener) -> None:
    s = opener()
    asyncio.run(s.put_script("acme", "region_hook", "log", "text"))
    asyncio.run(s.create_region("acme", "log", "log", 10, {}, [(1, {"content": "kept"})]))
    s.close()
    again = opener()
    assert [r.content for r in asyncio.run(again.list_scripts("acme"))] == ["text"]
    (row,) = again.load_regions("acme")
    assert not isinstance(row, str) and row.entries == [{"content": "kept"}]
    assert again.migrate() == len(MIGRATIONS)


def test_timestamps_keep_their_precision(opener: Opener) -> None:
    """PostgreSQL's REAL is 4 bytes: the schema maps SQLite's REAL to DOUBLE PRECISION."""
    s = opener()
    asyncio.run(s.revoke_tenant("nobody", 0.0))
    asyncio.run(s.put_tenant("t", "h"))
    asyncio.run(s.revoke_tenant("t", 1_796_000_000.123456))
    assert s.tenants()[0].revoked_at == 1_796_000_000.123456


def test_a_database_newer_than_the_release_is_refused(opener: Opener) -> None:
    s = opener()
    if s.path is not None:
        with sqlite3.connect(s.path) as raw:
            raw.execute(f"PRAGMA user_version={len(MIGRATIONS) + 1}")
    else:
        with psycopg.connect(s.where.replace("***", ""), autocommit=True) as raw:
            raw.execute("UPDATE rhaipool_schema SET version = %s", (len(MIGRATIONS) + 1,))
    with pytest.raises(ServiceConfigError, match="newer than this release"):
        opener()


def test_coordinators_starting_together_migrate_once(postgres: PostgresServer) -> None:
    url = postgres.fresh()
    opened: list[Storage] = []
    failures: list[BaseException] = []

    def start() -> None:
        try:
            opened.append(Storage(url))
        except BaseException as exc:  # reported below
            failures.append(exc)

    threads = [threading.Thread(target=start) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    try:
        assert failures == [] and len(opened) == 4
        with psycopg.connect(url) as raw:
            assert raw.execute("SELECT version FROM rhaipool_schema").fetchall() == [(len(MIGRATIONS),)]
    finally:
        for s in opened:
            s.close()


def test_a_lost_connection_is_a_503_and_the_next_call_reconnects(postgres: PostgresServer) -> None:
    url = postgres.fresh()
    s = Storage(url)
    try:
        asyncio.run(s.put_script("acme", "region_hook", "a", "x"))
        with psycopg.connect(url, autocommit=True) as admin:  # what a restart of the server does to it
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        with pytest.raises(StorageFailed) as failed:
            asyncio.run(s.put_script("acme", "region_hook", "b", "y"))
        assert failed.value.status == 503 and "storage unavailable" in str(failed.value.error)
        asyncio.run(s.put_script("acme", "region_hook", "c", "z"))
        assert [r.name for r in asyncio.run(s.list_scripts("acme"))] == ["a", "c"]
    finally:
        s.close()


def test_an_unreachable_server_is_a_config_error_without_the_password() -> None:
    url = "postgresql://rhaipool:hunter2@127.0.0.1:1/none"
    with pytest.raises(ServiceConfigError) as refused:
        Storage(url)
    assert "hunter2" not in str(refused.value) and "rhaipool:***@127.0.0.1:1" in str(refused.value)
    assert redacted_url("postgresql://u@h/db") == "postgresql://u@h/db"
