"""Storage that fails safe, against a real ``rhaipool serve``: a full disk answers 507 and changes nothing
(in memory or on disk); a retried write with the same ``Idempotency-Key`` applies once; nothing a tenant
stored can stop the next start; a persistent write costs the entry, not the region.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from service_support import TOKENS, ServiceProcess, free_port, small_tmpfs, write_config

from coordinator.client import ServiceError

HOOK = "fn render(ctx) { `${ctx.entries.len()}` }"
AUTH = {"Authorization": f"Bearer {TOKENS['acme']}"}


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs for the database (root only: mount)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    with small_tmpfs(mount, "size=4m"):
        yield mount


def _start(folder: Path, database: Path | None = None) -> ServiceProcess:
    port = free_port()
    config = write_config(folder, port=port, workers=1)
    if database is not None:
        config.write_text(
            config.read_text().replace('database = "state/rhaipool.db"', f'database = "{database}"')
        )
    return ServiceProcess.start(config, port)


def test_a_full_disk_answers_507_and_changes_nothing(tmp_path: Path, small_disk: Path) -> None:
    service = _start(tmp_path, small_disk / "rhaipool.db")
    try:
        with service.client("acme") as c:
            c.put_script("region_hook", "log", HOOK)
            c.create_region("log", script="log", budget=10_000_000, persistent=True)
            c.write("log", "before", tokens=1)
            filler = small_disk / "filler"
            with filler.open("wb") as f:  # fill the file system to its last byte
                try:
                    while True:
                        f.write(b"\0" * 65536)
                        f.flush()
                except OSError:
                    pass
            refused, acked = 0, ["before"]
            for i in range(5):
                try:
                    c.write("log", f"lost-{i}-" + "x" * 20000, tokens=1)
                    acked.append(f"lost-{i}-" + "x" * 20000)
                except ServiceError as exc:
                    assert exc.status in (503, 507), exc
                    refused += 1
            assert refused, "the full disk refused no write"
            assert [e["content"] for e in c.get_region("log")["entries"]] == acked  # memory as before
            filler.unlink()
            c.write("log", "after", tokens=1)
        assert service.stop() == 0
        service = _start(tmp_path, small_disk / "rhaipool.db")
        with service.client("acme") as c:
            assert [e["content"] for e in c.get_region("log")["entries"]] == [*acked, "after"]
    finally:
        service.stop()


def fill(disk: Path) -> Path:
    """Fill the file system to its last byte; the filler file (unlink it to make room again)."""
    filler = disk / "filler"
    with filler.open("wb") as f:
        try:
            while True:
                f.write(b"\0" * 65536)
                f.flush()
        except OSError:
            pass
    return filler


def test_on_a_full_disk_every_kind_of_change_is_refused_and_changes_nothing(
    tmp_path: Path, small_disk: Path
) -> None:
    """Script PUTs and deletes, region opens and deletes, replaces: each a 507 (or 503) that leaves
    memory and the database as they were (issue 22: "B's script PUT failed while A filled the disk"
    answered 500, and what a 500 left in memory was saved by the next good change)."""
    big = "// " + "p" * 400_000 + "\n" + HOOK
    service = _start(tmp_path, small_disk / "rhaipool.db")
    try:
        with service.client("acme") as c:
            c.put_script("region_hook", "log", HOOK)
            c.create_region("kept", script="log", budget=1000, persistent=True)
            c.write("kept", "before", tokens=1)
            c.put_script("region_hook", "spare", HOOK)
            c.create_region("doomed", script="log", budget=1000, persistent=True)
            filler = fill(small_disk)
            changes: list[tuple[str, Callable[[], object]]] = [
                ("PUT a script", lambda: c.put_script("region_hook", "new", big)),
                ("PUT over a script", lambda: c.put_script("region_hook", "log", big)),
                ("open a persistent region", lambda: c.create_region("new", script="log", budget=10**6,
                                                                     persistent=True)),
                ("replace", lambda: c.replace("kept", "r" * 400_000, tokens=1)),
                ("delete a script", lambda: c.delete_script("region_hook", "spare")),
                ("delete a region", lambda: c.delete_region("doomed")),
            ]  # fmt: skip
            for what, change in changes:
                with pytest.raises(ServiceError) as refused:
                    change()
                assert refused.value.status in (503, 507), (what, refused.value)

            def as_before() -> None:
                assert c.get_script("region_hook", "log")["content"] == HOOK
                assert sorted(s["name"] for s in c.list_scripts()["scripts"]) == ["log", "spare"]
                assert sorted(r["name"] for r in c.list_regions()["regions"]) == ["doomed", "kept"]
                assert [e["content"] for e in c.get_region("kept")["entries"]] == ["before"]

            as_before()
            filler.unlink()
            c.write("kept", "after", tokens=1)  # a good change saves nothing the refused ones left
        assert service.stop() == 0
        service = _start(tmp_path, small_disk / "rhaipool.db")
        with service.client("acme") as c:
            assert c.get_script("region_hook", "log")["content"] == HOOK
            assert sorted(s["name"] for s in c.list_scripts()["scripts"]) == ["log", "spare"]
            assert sorted(r["name"] for r in c.list_regions()["regions"]) == ["doomed", "kept"]
            assert [e["content"] for e in c.get_region("kept")["entries"]] == ["before", "after"]
    finally:
        service.stop()


@pytest.mark.parametrize("umask", [0o022, 0o000])
def test_the_database_and_its_wal_are_0600_whatever_the_umask(tmp_path: Path, umask: int) -> None:
    """Under umask 022 they were created 0644 (issue 22); checked once the WAL exists (after a write)."""
    previous = os.umask(umask)
    try:
        service = _start(tmp_path)
    finally:
        os.umask(previous)
    db = service.config.parent / "state" / "rhaipool.db"
    try:
        with service.client("acme") as c:
            c.put_script("region_hook", "log", HOOK)
            c.create_region("log", script="log", budget=1000, persistent=True)
            c.write("log", "a", tokens=1)
        for path in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
            assert path.exists(), path
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, (path, oct(path.stat().st_mode))
    finally:
        assert service.stop() == 0


def test_an_idempotency_key_applies_a_retried_write_once(tmp_path: Path) -> None:
    service = _start(tmp_path)
    try:
        with service.client("acme") as c:
            c.put_script("region_hook", "log", HOOK)
            c.create_region("log", script="log", budget=1000)
        key = {"Idempotency-Key": str(uuid.uuid4()), **AUTH}
        url = f"{service.url}/api/regions/log/write"
        first = httpx.post(url, json={"content": "once", "tokens": 1}, headers=key)
        again = httpx.post(url, json={"content": "once", "tokens": 1}, headers=key)
        assert first.status_code == again.status_code == 200
        assert again.json() == first.json() and again.headers["idempotent-replayed"] == "true"
        other = httpx.post(url, json={"content": "twice", "tokens": 1}, headers=key)
        assert other.status_code == 422
        globex = {"Idempotency-Key": key["Idempotency-Key"], "Authorization": f"Bearer {TOKENS['globex']}"}
        assert httpx.post(url, json={"content": "once", "tokens": 1}, headers=globex).status_code == 404
        with service.client("acme") as c:
            assert [e["content"] for e in c.get_region("log")["entries"]] == ["once"]
    finally:
        assert service.stop() == 0


def test_kept_answers_are_bounded_and_a_dropped_one_still_refuses_a_second_run(tmp_path: Path) -> None:
    """``max_idempotency_bytes``: past it the oldest answers lose their bodies, and a replay of such a
    key answers 409 saying its request applied; it never runs again. (30 keys of ~250 bytes each
    without their ~110-byte answers fit in 9 000 bytes, so none is forgotten.)"""
    port = free_port()
    extra = "[serve.tenant_defaults]\nmax_idempotency_bytes = 9000"
    service = ServiceProcess.start(write_config(tmp_path, port=port, workers=1, extra=extra), port)
    try:
        with service.client("acme") as c:
            c.put_script("region_hook", "log", HOOK)
            c.create_region("log", script="log", budget=100_000)
        url = f"{service.url}/api/regions/log/write"
        for i in range(30):
            sent = httpx.post(
                url, json={"content": f"w{i}", "tokens": 1}, headers={"Idempotency-Key": f"k{i}", **AUTH}
            )
            assert sent.status_code == 200, sent.text
        last = httpx.post(
            url, json={"content": "w29", "tokens": 1}, headers={"Idempotency-Key": "k29", **AUTH}
        )
        assert last.status_code == 200 and last.headers["idempotent-replayed"] == "true"
        first = httpx.post(
            url, json={"content": "w0", "tokens": 1}, headers={"Idempotency-Key": "k0", **AUTH}
        )
        assert first.status_code == 409 and "applied (status 200)" in first.json()["error"], first.text
        with service.client("acme") as c:
            assert [e["content"] for e in c.get_region("log")["entries"]] == [f"w{i}" for i in range(30)]
    finally:
        assert service.stop() == 0
    with sqlite3.connect(tmp_path / "state" / "rhaipool.db") as raw:
        (kept,) = raw.execute(
            "SELECT SUM(length(body) + length(key) + length(request) + 128) FROM idempotency"
        ).fetchone()
    # counted in full once an eighth of the quota was kept since the last count (each key's ~150-byte
    # request fingerprint only then): at most 9 000 + 1 125 + the few fingerprints in between
    assert kept <= 9000 + 9000 // 8 + 4 * 150


def test_a_429_releases_its_key_so_the_retry_runs_once_room_is_made(tmp_path: Path) -> None:
    """A quota's 429 applied nothing: replaying it would refuse every retry, so the key is released
    and the retry, once the tenant made room, runs (and is then kept like any answer)."""
    port = free_port()
    config = write_config(tmp_path, port=port, workers=1, extra="[serve.tenant_defaults]\nmax_regions = 1")
    service = ServiceProcess.start(config, port)
    try:
        with service.client("acme") as c:
            c.put_script("region_hook", "log", HOOK)
            c.create_region("first", script="log", budget=1000)
        key = {"Idempotency-Key": "open-second", **AUTH}
        body = {"name": "second", "script": "log", "budget": 1000}
        refused = httpx.post(f"{service.url}/api/regions", json=body, headers=key)
        assert refused.status_code == 429, refused.text
        assert httpx.delete(f"{service.url}/api/regions/first", headers=AUTH).status_code == 204
        opened = httpx.post(f"{service.url}/api/regions", json=body, headers=key)
        assert opened.status_code in (200, 201) and "idempotent-replayed" not in opened.headers, opened.text
        replay = httpx.post(f"{service.url}/api/regions", json=body, headers=key)
        assert replay.status_code == opened.status_code and replay.headers["idempotent-replayed"] == "true"
    finally:
        assert service.stop() == 0


def test_a_key_whose_first_request_was_cut_short_never_applies_twice(tmp_path: Path) -> None:
    """The key is claimed before its request runs: a request a crash cut short (claimed, unanswered)
    is never run again under that key, and the refusal says why; a 5xx releases the key."""
    service = _start(tmp_path)
    db = service.config.parent / "state" / "rhaipool.db"
    url = f"{service.url}/api/regions/log/write"
    with service.client("acme") as c:
        c.put_script("region_hook", "log", HOOK)
        c.create_region("log", script="log", budget=1000, persistent=True)
    first = httpx.post(url, json={"content": "a", "tokens": 1}, headers={"Idempotency-Key": "k1", **AUTH})
    assert first.status_code == 200
    assert service.stop() == 0
    with sqlite3.connect(db) as raw:  # what kill -9 between a commit and its answer leaves behind
        raw.execute("UPDATE idempotency SET status = 0, body = x'' WHERE key = 'k1'")
    service = _start(tmp_path)
    url = f"{service.url}/api/regions/log/write"
    try:
        again = httpx.post(url, json={"content": "a", "tokens": 1}, headers={"Idempotency-Key": "k1", **AUTH})
        assert again.status_code == 409 and "cut short" in again.text
        missing = f"{service.url}/api/regions/nothing/write"
        lost = httpx.post(missing, json={"content": "b"}, headers={"Idempotency-Key": "k2", **AUTH})
        assert lost.status_code == 404  # a 4xx answer is kept: the same again
        replay = httpx.post(missing, json={"content": "b"}, headers={"Idempotency-Key": "k2", **AUTH})
        assert replay.status_code == 404 and replay.headers["idempotent-replayed"] == "true"
        with service.client("acme") as c:
            assert [e["content"] for e in c.get_region("log")["entries"]] == ["a"]
    finally:
        assert service.stop() == 0


def test_rows_that_cannot_load_are_set_aside_and_the_rest_loads(tmp_path: Path) -> None:
    service = _start(tmp_path)
    db = service.config.parent / "state" / "rhaipool.db"
    with service.client("acme") as c:
        c.put_script("region_hook", "log", HOOK)
        c.create_region("good", script="log", budget=1000, persistent=True)
        c.write("good", "kept", tokens=1)
        c.create_region("broken", script="log", budget=1000, persistent=True)
    with service.client("globex") as c:
        c.put_script("region_hook", "log", HOOK)
        c.create_region("other", script="log", budget=1000, persistent=True)
    assert service.stop() == 0
    with sqlite3.connect(db) as raw:  # what an older version, or a bad disk, could have left behind
        raw.execute("UPDATE regions SET options = '{not json' WHERE name = 'broken'")
        raw.execute(
            "INSERT INTO scripts VALUES ('acme', 'region_hook', ?, 'fn render(ctx) { 1 }', 'x', 0)",
            ("x" * 300,),
        )
    service = _start(tmp_path)
    try:
        with service.client("acme") as c:
            names = [r["name"] for r in c.list_regions()["regions"]]
            assert names == ["good"]
            assert [e["content"] for e in c.get_region("good")["entries"]] == ["kept"]
        with service.client("globex") as c:
            assert [r["name"] for r in c.list_regions()["regions"]] == ["other"]
        assert "broken" in service.log()
    finally:
        assert service.stop() == 0


def test_a_long_script_name_is_refused_before_anything_is_stored(tmp_path: Path) -> None:
    service = _start(tmp_path)
    with service.client("acme") as c:
        with pytest.raises(ServiceError) as refused:
            c.put_script("region_hook", "x" * 300, HOOK)
        assert refused.value.status == 400
        with pytest.raises(ServiceError):
            c.put_script("region_hook", "a\nb", HOOK)
    assert service.stop() == 0
    service = _start(tmp_path)  # starts again: nothing was stored
    try:
        with service.client("acme") as c:
            assert c.list_scripts()["scripts"] == []
    finally:
        assert service.stop() == 0


def test_a_persistent_write_costs_the_entry_not_the_region(tmp_path: Path) -> None:
    service = _start(tmp_path)
    try:
        with service.client("acme") as c:
            c.put_script("region_hook", "log", HOOK)
            c.create_region("big", script="log", budget=10_000_000, persistent=True)
            for i in range(40):
                c.write("big", f"{i}-" + "y" * 200_000, tokens=1)  # ~8 MB held

            def timed() -> float:
                begun = time.perf_counter()
                c.write("big", "small", tokens=1)
                return time.perf_counter() - begun

            small = min(timed() for _ in range(5))
        assert small < 0.25, f"a small write to an 8 MB region took {small:.3f} s"
    finally:
        assert service.stop() == 0
