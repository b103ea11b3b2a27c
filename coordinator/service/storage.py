"""The service's durable state in one SQLite file: tenants, their scripts, regions and provider tables.

Every write commits before it returns, with ``journal_mode=WAL`` and ``synchronous=FULL``, so a caller
that acknowledges after :class:`Storage` returns acknowledges only what survives ``kill -9`` and power
loss. A write that cannot commit (disk full, I/O error) is rolled back and raises
:class:`StorageFailed` (507 or 503): the caller changes its memory only after a commit, so memory and
file stay as they were. One connection serves the whole process from one thread (``asyncio.to_thread``
through a lock), which keeps SQLite's single-writer rule trivially true and the event loop free of disk
waits. The file, its WAL and shared-memory files are 0600 whatever the umask: they hold every tenant's
data. The schema is versioned with ``PRAGMA user_version``; :data:`MIGRATIONS` only ever grows.

A persistent region is stored as one row per entry (``region_entries``, ordered by ``seq``), so a write
costs what changed -- the new entry, the evicted ones -- not the whole region
(:meth:`Storage.change_entries`).

Past 400 lines because every statement the service runs is here, one short method each, so the
schema and every query that depends on it read in one file.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from coordinator.service.errors import ServiceConfigError, StorageFailed

__all__ = ["MIGRATIONS", "RegionRow", "ScriptRow", "ScriptStamp", "Storage", "StorageFailed", "TenantRow"]

T = TypeVar("T")

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    (  # 1: scripts, persistent regions, provider state, tenants managed over the admin API
        (
            "CREATE TABLE scripts (tenant TEXT NOT NULL, kind TEXT NOT NULL, name TEXT NOT NULL,"
            " content TEXT NOT NULL, sha256 TEXT NOT NULL, updated_at REAL NOT NULL,"
            " PRIMARY KEY (tenant, kind, name))"
        ),
        (
            "CREATE TABLE regions (tenant TEXT NOT NULL, name TEXT NOT NULL, script TEXT NOT NULL,"
            " budget INTEGER NOT NULL, options TEXT NOT NULL, entries TEXT NOT NULL,"
            " version INTEGER NOT NULL,"
            " PRIMARY KEY (tenant, name))"
        ),
        (
            "CREATE TABLE provider_state (tenant TEXT NOT NULL, name TEXT NOT NULL, state TEXT NOT NULL,"
            " updated_at REAL NOT NULL, PRIMARY KEY (tenant, name))"
        ),
        "CREATE TABLE tenants (id TEXT PRIMARY KEY, token_sha256 TEXT NOT NULL)",
    ),
    (  # 2: entries one row each; revocation with retention; tenants' provider tables; idempotency keys
        (
            "CREATE TABLE region_entries (tenant TEXT NOT NULL, region TEXT NOT NULL, seq INTEGER NOT NULL,"
            " entry TEXT NOT NULL, PRIMARY KEY (tenant, region, seq))"
        ),
        (
            "INSERT INTO region_entries SELECT r.tenant, r.name, CAST(j.key AS INTEGER) + 1, j.value"
            " FROM regions AS r, json_each(r.entries) AS j"
        ),
        "UPDATE regions SET entries = '[]'",
        "ALTER TABLE tenants ADD COLUMN revoked_at REAL",
        (
            "CREATE TABLE provider_tables (tenant TEXT NOT NULL, name TEXT NOT NULL, sealed TEXT NOT NULL,"
            " updated_at REAL NOT NULL, PRIMARY KEY (tenant, name))"
        ),
        (
            "CREATE TABLE idempotency (tenant TEXT NOT NULL, key TEXT NOT NULL, request TEXT NOT NULL,"
            " status INTEGER NOT NULL, headers TEXT NOT NULL, body BLOB NOT NULL, created_at REAL NOT NULL,"
            " PRIMARY KEY (tenant, key))"
        ),
        # Versions before 2 stored what ``initialize`` returned, API keys included, in clear.
        "DELETE FROM provider_state",
    ),
)
_TENANT_TABLES: Final = (
    "scripts",
    "regions",
    "region_entries",
    "provider_state",
    "provider_tables",
    "idempotency",
)
_FULL: Final = frozenset({sqlite3.SQLITE_FULL}) if hasattr(sqlite3, "SQLITE_FULL") else frozenset({13})


@dataclass(frozen=True, slots=True)
class ScriptRow:
    """One stored script."""

    kind: str
    name: str
    content: str
    sha256: str
    updated_at: float


@dataclass(frozen=True, slots=True)
class ScriptStamp:
    """What the service keeps in memory of a stored script: enough to notice a change and count quota."""

    sha256: str
    size: int


@dataclass(frozen=True, slots=True)
class RegionRow:
    """One persistent region: how to reopen it, its entries (JSON objects, oldest first) and their seqs."""

    name: str
    script: str
    budget: int
    options: dict[str, Any]
    entries: list[dict[str, Any]]
    seqs: list[int]


@dataclass(frozen=True, slots=True)
class TenantRow:
    """A tenant added over the admin API; ``revoked_at`` is set once it was revoked (data kept)."""

    id: str
    token_sha256: str
    revoked_at: float | None


def _failure(exc: sqlite3.Error) -> StorageFailed:
    code = getattr(exc, "sqlite_errorcode", None)
    if code in _FULL or "full" in str(exc).lower():
        return StorageFailed(507, "storage is full: the change was not saved and nothing changed")
    return StorageFailed(503, f"storage unavailable ({exc}): the change was not saved and nothing changed")


def _private(path: Path) -> None:
    """Create ``path`` 0600 if missing, and make it (and SQLite's side files) 0600 if they exist."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(f"{path}{suffix}", 0o600)


class Storage:
    """The one door to the database file; every method that writes returns once committed."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        _private(path)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self.migrate()
        _private(path)  # the WAL and shm files exist now

    def migrate(self) -> int:
        """Apply the migrations this file has not seen, each in its own transaction; the new version."""
        with self._lock:
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            if version > len(MIGRATIONS):
                raise ServiceConfigError(
                    f"database {self.path} is at schema version {version}, newer than this release's "
                    f"{len(MIGRATIONS)}: run the release that wrote it, or restore a backup taken before"
                )
            for number, statements in enumerate(MIGRATIONS[version:], start=version + 1):
                self._db.execute("BEGIN IMMEDIATE")
                for statement in statements:
                    self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version={number}")
                self._db.execute("COMMIT")
            return len(MIGRATIONS)

    def close(self) -> None:
        """Close the connection (a checkpoint folds the WAL back into the file)."""
        with self._lock:
            self._db.close()

    def _locked(self, fn: Callable[[sqlite3.Connection], T], *, transaction: bool) -> T:
        with self._lock:
            try:
                if not transaction:
                    return fn(self._db)
                self._db.execute("BEGIN IMMEDIATE")
                result = fn(self._db)
                self._db.execute("COMMIT")
                return result
            except sqlite3.Error as exc:
                if self._db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                raise _failure(exc) from None

    async def _run(self, fn: Callable[[sqlite3.Connection], T], *, transaction: bool = False) -> T:
        return await asyncio.to_thread(self._locked, fn, transaction=transaction)

    async def _write(self, statement: str, params: tuple[Any, ...]) -> int:
        return await self._run(lambda db: db.execute(statement, params).rowcount)

    # -- scripts -----------------------------------------------------------------------------------

    async def put_script(self, tenant: str, kind: str, name: str, content: str) -> ScriptRow:
        """Insert or replace; durable when this returns."""
        row = ScriptRow(kind, name, content, hashlib.sha256(content.encode()).hexdigest(), time.time())
        await self._write(
            "INSERT OR REPLACE INTO scripts VALUES (?, ?, ?, ?, ?, ?)",
            (tenant, kind, name, content, row.sha256, row.updated_at),
        )
        return row

    async def get_script(self, tenant: str, kind: str, name: str) -> ScriptRow | None:
        """The stored script, or None."""

        def run(db: sqlite3.Connection) -> ScriptRow | None:
            found = db.execute(
                "SELECT kind, name, content, sha256, updated_at FROM scripts"
                " WHERE tenant = ? AND kind = ? AND name = ?",
                (tenant, kind, name),
            ).fetchone()
            return None if found is None else ScriptRow(*found)

        return await self._run(run)

    async def list_scripts(self, tenant: str) -> list[ScriptRow]:
        """One tenant's scripts, sorted by kind then name."""

        def run(db: sqlite3.Connection) -> list[ScriptRow]:
            rows = db.execute(
                "SELECT kind, name, content, sha256, updated_at FROM scripts WHERE tenant = ?"
                " ORDER BY kind, name",
                (tenant,),
            ).fetchall()
            return [ScriptRow(*r) for r in rows]

        return await self._run(run)

    def script_stamps(self) -> list[tuple[str, str, str, ScriptStamp]]:
        """``(tenant, kind, name, stamp)`` of every stored script (synchronous: read once at start-up)."""

        def run(db: sqlite3.Connection) -> list[tuple[str, str, str, ScriptStamp]]:
            rows = db.execute(
                "SELECT tenant, kind, name, sha256, length(CAST(content AS BLOB)) FROM scripts"
            ).fetchall()
            return [(t, k, n, ScriptStamp(s, int(size))) for t, k, n, s, size in rows]

        return self._locked(run, transaction=False)

    async def delete_script(self, tenant: str, kind: str, name: str) -> bool:
        """Whether a script was deleted."""
        return (
            await self._write(
                "DELETE FROM scripts WHERE tenant = ? AND kind = ? AND name = ?", (tenant, kind, name)
            )
            > 0
        )

    # -- persistent regions ------------------------------------------------------------------------

    async def create_region(
        self,
        tenant: str,
        name: str,
        script: str,
        budget: int,
        options: dict[str, Any],
        entries: Sequence[tuple[int, dict[str, Any]]] = (),
    ) -> None:
        """A new persistent region and its first entries, in one transaction."""

        def run(db: sqlite3.Connection) -> None:
            db.execute(
                "INSERT OR REPLACE INTO regions VALUES (?, ?, ?, ?, ?, '[]', 1)",
                (tenant, name, script, budget, json.dumps(options)),
            )
            db.execute("DELETE FROM region_entries WHERE tenant = ? AND region = ?", (tenant, name))
            _insert_entries(db, tenant, name, entries)

        await self._run(run, transaction=True)

    async def change_entries(
        self,
        tenant: str,
        name: str,
        removed: Iterable[int],
        added: Sequence[tuple[int, dict[str, Any]]],
        *,
        rewrite: bool = False,
    ) -> None:
        """Remove the entries of ``removed`` seqs and add ``added`` in one transaction (``rewrite``: all
        of the region's entries go first). Readers see the old list or the new, never half of one."""
        gone = [(tenant, name, seq) for seq in removed]

        def run(db: sqlite3.Connection) -> None:
            if rewrite:
                db.execute("DELETE FROM region_entries WHERE tenant = ? AND region = ?", (tenant, name))
            elif gone:
                db.executemany("DELETE FROM region_entries WHERE tenant = ? AND region = ? AND seq = ?", gone)
            _insert_entries(db, tenant, name, added)
            db.execute(
                "UPDATE regions SET version = version + 1 WHERE tenant = ? AND name = ?", (tenant, name)
            )

        await self._run(run, transaction=True)

    def load_regions(self, tenant: str) -> list[RegionRow | str]:
        """One tenant's persistent regions; a row that cannot be read is a one-line problem instead."""

        def run(db: sqlite3.Connection) -> list[RegionRow | str]:
            out: list[RegionRow | str] = []
            for name, script, budget, options in db.execute(
                "SELECT name, script, budget, options FROM regions WHERE tenant = ? ORDER BY name", (tenant,)
            ).fetchall():
                try:
                    rows = db.execute(
                        "SELECT seq, entry FROM region_entries WHERE tenant = ? AND region = ? ORDER BY seq",
                        (tenant, name),
                    ).fetchall()
                    out.append(
                        RegionRow(
                            name,
                            script,
                            int(budget),
                            json.loads(options),
                            [json.loads(e) for _, e in rows],
                            [int(s) for s, _ in rows],
                        )
                    )
                except (ValueError, TypeError) as exc:
                    out.append(f"region {tenant}/{name} not restored: its stored row cannot be read: {exc}")
            return out

        return self._locked(run, transaction=False)

    def region_tenants(self) -> list[str]:
        """Every tenant with a persistent region (synchronous: start-up)."""
        rows = self._locked(
            lambda db: db.execute("SELECT DISTINCT tenant FROM regions ORDER BY tenant").fetchall(),
            transaction=False,
        )
        return [r[0] for r in rows]

    async def delete_region(self, tenant: str, name: str) -> bool:
        """Whether a persistent region was deleted (its entries go with it)."""

        def run(db: sqlite3.Connection) -> bool:
            db.execute("DELETE FROM region_entries WHERE tenant = ? AND region = ?", (tenant, name))
            return (
                db.execute("DELETE FROM regions WHERE tenant = ? AND name = ?", (tenant, name)).rowcount > 0
            )

        return await self._run(run, transaction=True)

    # -- provider state and tables -----------------------------------------------------------------

    async def save_provider_state(self, tenant: str, name: str, state: Any) -> None:
        """What the provider's ``initialize`` returned (placeholders, never secret values), for operators."""
        await self._write(
            "INSERT OR REPLACE INTO provider_state VALUES (?, ?, ?, ?)",
            (tenant, name, json.dumps(state, default=repr), time.time()),
        )

    async def provider_state(self, tenant: str, name: str) -> Any:
        """The last stored state, or None."""

        def run(db: sqlite3.Connection) -> Any:
            found = db.execute(
                "SELECT state FROM provider_state WHERE tenant = ? AND name = ?", (tenant, name)
            ).fetchone()
            return None if found is None else json.loads(found[0])

        return await self._run(run)

    async def put_provider_table(self, tenant: str, name: str, sealed: str) -> None:
        """A tenant's own provider table, sealed (``secrets.py``) as the caller gives it."""
        await self._write(
            "INSERT OR REPLACE INTO provider_tables VALUES (?, ?, ?, ?)", (tenant, name, sealed, time.time())
        )

    async def delete_provider_table(self, tenant: str, name: str) -> bool:
        """Whether the tenant had that table."""
        return (
            await self._write("DELETE FROM provider_tables WHERE tenant = ? AND name = ?", (tenant, name)) > 0
        )

    def provider_tables(self) -> list[tuple[str, str, str]]:
        """``(tenant, name, sealed)`` of every tenant's provider table (synchronous: start-up)."""
        return self._locked(
            lambda db: db.execute("SELECT tenant, name, sealed FROM provider_tables").fetchall(),
            transaction=False,
        )

    # -- tenants managed over the admin API --------------------------------------------------------

    async def put_tenant(self, tenant: str, token_sha256: str) -> None:
        """Add a tenant, rotate its token, or reinstate a revoked one."""
        await self._write("INSERT OR REPLACE INTO tenants VALUES (?, ?, NULL)", (tenant, token_sha256))

    async def revoke_tenant(self, tenant: str, now: float) -> bool:
        """Mark an API tenant revoked (its token stops working; its data is kept); whether it was active."""
        return (
            await self._write(
                "UPDATE tenants SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (now, tenant)
            )
            > 0
        )

    async def purge_tenant(self, tenant: str) -> None:
        """Remove everything stored for ``tenant`` (its row included), in one transaction."""

        def run(db: sqlite3.Connection) -> None:
            for table in _TENANT_TABLES:
                db.execute(f"DELETE FROM {table} WHERE tenant = ?", (tenant,))
            db.execute("DELETE FROM tenants WHERE id = ?", (tenant,))

        await self._run(run, transaction=True)

    def tenants(self) -> list[TenantRow]:
        """Admin-managed tenants, revoked ones included (synchronous: start-up and reload)."""
        rows = self._locked(
            lambda db: db.execute("SELECT id, token_sha256, revoked_at FROM tenants ORDER BY id").fetchall(),
            transaction=False,
        )
        return [TenantRow(*r) for r in rows]

    def forget_tenant_rows(self, tenants: Iterable[str]) -> list[str]:
        """Drop admin rows of these ids (tenants the config file owns); the ids that had one."""
        ids = list(tenants)

        def run(db: sqlite3.Connection) -> list[str]:
            had = [t for t in ids if db.execute("SELECT 1 FROM tenants WHERE id = ?", (t,)).fetchone()]
            db.executemany("DELETE FROM tenants WHERE id = ?", [(t,) for t in had])
            return had

        return self._locked(run, transaction=True)

    # -- idempotency keys --------------------------------------------------------------------------

    async def idempotent_answer(self, tenant: str, key: str) -> tuple[str, int, str, bytes] | None:
        """``(request, status, headers, body)`` stored for this key, or None."""
        found = await self._run(
            lambda db: db.execute(
                "SELECT request, status, headers, body FROM idempotency WHERE tenant = ? AND key = ?",
                (tenant, key),
            ).fetchone()
        )
        return None if found is None else (found[0], int(found[1]), found[2], bytes(found[3]))

    async def claim_idempotency_key(self, tenant: str, key: str, request: str, expire_before: float) -> bool:
        """Record that a request with this key starts (status 0: no answer yet), forgetting keys older
        than ``expire_before``; False when the key is already recorded."""

        def run(db: sqlite3.Connection) -> bool:
            db.execute("DELETE FROM idempotency WHERE created_at < ?", (expire_before,))
            return (
                db.execute(
                    "INSERT OR IGNORE INTO idempotency VALUES (?, ?, ?, 0, '[]', x'', ?)",
                    (tenant, key, request, time.time()),
                ).rowcount
                == 1
            )

        return await self._run(run, transaction=True)

    async def save_idempotent_answer(
        self, tenant: str, key: str, status: int, headers: str, body: bytes
    ) -> None:
        """The answer given for a claimed key."""
        await self._write(
            "UPDATE idempotency SET status = ?, headers = ?, body = ? WHERE tenant = ? AND key = ?",
            (status, headers, body, tenant, key),
        )

    async def release_idempotency_key(self, tenant: str, key: str) -> None:
        """Forget a claimed key whose request applied nothing (a 5xx), so that a retry runs."""
        await self._write(
            "DELETE FROM idempotency WHERE tenant = ? AND key = ? AND status = 0", (tenant, key)
        )


def _insert_entries(
    db: sqlite3.Connection, tenant: str, name: str, entries: Iterable[tuple[int, Any]]
) -> None:
    db.executemany(
        "INSERT INTO region_entries VALUES (?, ?, ?, ?)",
        [(tenant, name, seq, json.dumps(entry)) for seq, entry in entries],
    )
