"""deploy/README.md's runbook, run as written against a real ``rhaipool serve``: a backup taken with
``sqlite3 .backup`` or ``VACUUM INTO`` while tenants keep writing is a whole, consistent database, and
the restore steps (stop, replace the file, drop the old WAL, start) bring exactly its contents back."""

from __future__ import annotations

import contextlib
import shutil
import sqlite3
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from service_support import ServiceProcess, free_port, write_config

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "deploy" / "README.md").read_text()
SCRIPT = 'fn render(ctx) {{ "v{}" }}\n'


@pytest.fixture
def service(tmp_path: Path) -> Iterator[ServiceProcess]:
    port = free_port()
    running = ServiceProcess.start(write_config(tmp_path, port=port, workers=1), port)
    yield running
    if running.process.poll() is None:
        assert running.stop() == 0


def _database(service: ServiceProcess) -> Path:
    return service.config.parent / "state" / "rhaipool.db"


def _scripts(db: Path) -> dict[str, str]:
    with contextlib.closing(sqlite3.connect(db)) as conn:  # closed here, not whenever it is collected
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert conn.execute("PRAGMA user_version").fetchone()[0] >= 1
        names = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        table = next(n for n in names if "script" in n)
        columns = [row[1] for row in conn.execute(f"PRAGMA table_info({table})")]
        rows = conn.execute(f"SELECT name, content FROM {table}").fetchall() if "content" in columns else []
    return dict(rows)


def _backup_while_writing(service: ServiceProcess, take: object) -> tuple[dict[str, str], set[str]]:
    """Tenants write scripts while ``take()`` copies the database; what the copy holds, what was acked."""
    acked: set[str] = set()
    stop = threading.Event()

    def writer() -> None:
        with service.client("acme") as c:
            n = 0
            while not stop.is_set() and n < 400:
                c.put_script("region_hook", f"s{n}", SCRIPT.format(n))
                acked.add(f"s{n}")
                n += 1

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        while len(acked) < 20:
            threading.Event().wait(0.01)
        assert callable(take)
        copy = take()
    finally:
        stop.set()
        thread.join(60)
    return _scripts(copy), acked


@pytest.mark.skipif(shutil.which("sqlite3") is None, reason="the sqlite3 command is not installed")
def test_sqlite3_backup_of_a_running_service_is_whole(service: ServiceProcess, tmp_path: Path) -> None:
    assert "sqlite3 /var/lib/rhaipool/rhaipool.db \".backup '" in README
    copy = tmp_path / "backup.db"

    def take() -> Path:
        subprocess.run(["sqlite3", str(_database(service)), f".backup '{copy}'"], check=True, timeout=60)
        return copy

    held, acked = _backup_while_writing(service, take)
    assert len(held) >= 20
    assert all(held[name] == SCRIPT.format(name[1:]) for name in held), "a script half written"
    assert set(held) <= acked
    assert set(held) == {f"s{i}" for i in range(len(held))}, "not one snapshot of sequential writes"


def test_vacuum_into_backup_and_restore_bring_the_contents_back(
    service: ServiceProcess, tmp_path: Path
) -> None:
    assert "VACUUM INTO '/var/lib/rhaipool/backup.db'" in README and "rhaipool.db-wal" in README
    copy = tmp_path / "backup.db"

    def take() -> Path:
        # the runbook's one-liner, with this copy's path; closed at once, as the sqlite3 command's is: a
        # connection left to the collector holds the old WAL open and, closing later, checkpoints it
        # into the restored file (the restore then showed writes made after the backup)
        with contextlib.closing(sqlite3.connect(_database(service))) as conn:
            conn.execute(f"VACUUM INTO '{copy}'")
        return copy

    held, acked = _backup_while_writing(service, take)
    assert len(held) >= 20 and set(held) <= acked
    assert set(held) == {f"s{i}" for i in range(len(held))}, "not one snapshot of sequential writes"
    with service.client("acme") as c:
        c.put_script("region_hook", "after-backup", SCRIPT.format("late"))
    assert service.stop() == 0
    db = _database(service)
    shutil.copyfile(copy, db)
    for stale in (db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        stale.unlink(missing_ok=True)
    restored = ServiceProcess.start(service.config, service.port)
    try:
        with restored.client("acme") as c:
            names = {s["name"] for s in c.list_scripts()["scripts"]}
            assert names == set(held), "the restore is not exactly the backup"
            assert c.get_script("region_hook", "s0")["content"] == SCRIPT.format(0)
    finally:
        assert restored.stop() == 0
