"""The service's durable state in one SQLite file: tenants' scripts, persistent regions, provider state.

Every write commits before it returns, with ``journal_mode=WAL`` and ``synchronous=FULL``, so a caller
that acknowledges after :class:`Storage` returns acknowledges only what survives ``kill -9`` and power
loss. One connection serves the whole process from one thread (``asyncio.to_thread`` through a lock),
which keeps SQLite's single-writer rule trivially true and the event loop free of disk waits.
The schema is versioned with ``PRAGMA user_version``; :data:`MIGRATIONS` only ever grows.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

__all__ = ["MIGRATIONS", "RegionRow", "ScriptRow", "Storage"]

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
)


@dataclass(frozen=True, slots=True)
class ScriptRow:
    """One stored script."""

    kind: str
    name: str
    content: str
    sha256: str
    updated_at: float


@dataclass(frozen=True, slots=True)
class RegionRow:
    """One persistent region: how to reopen it and its entries (JSON objects, oldest first)."""

    name: str
    script: str
    budget: int
    options: dict[str, Any]
    entries: list[dict[str, Any]]
    version: int


class Storage:
    """The one door to the database file; every method is a coroutine that returns once committed."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=5000")
        self.migrate()

    def migrate(self) -> int:
        """Apply the migrations this file has not seen, each in its own transaction; the new version."""
        with self._lock:
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
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

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def locked() -> T:
            with self._lock:
                return fn(self._db)

        return await asyncio.to_thread(locked)

    async def _write(self, statement: str, params: tuple[Any, ...]) -> int:
        def run(db: sqlite3.Connection) -> int:
            return db.execute(statement, params).rowcount

        return await self._run(run)

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

    async def list_scripts(self, tenant: str | None = None) -> list[tuple[str, ScriptRow]]:
        """``(tenant, row)`` for one tenant (or all), sorted by kind then name."""

        def run(db: sqlite3.Connection) -> list[tuple[str, ScriptRow]]:
            where, params = ("WHERE tenant = ?", (tenant,)) if tenant is not None else ("", ())
            rows = db.execute(
                f"SELECT tenant, kind, name, content, sha256, updated_at FROM scripts {where}"
                " ORDER BY tenant, kind, name",
                params,
            ).fetchall()
            return [(r[0], ScriptRow(*r[1:])) for r in rows]

        return await self._run(run)

    async def delete_script(self, tenant: str, kind: str, name: str) -> bool:
        """Whether a script was deleted."""
        return (
            await self._write(
                "DELETE FROM scripts WHERE tenant = ? AND kind = ? AND name = ?", (tenant, kind, name)
            )
            > 0
        )

    # -- persistent regions ------------------------------------------------------------------------

    async def save_region(
        self, tenant: str, name: str, script: str, budget: int, options: dict[str, Any], entries: list[Any]
    ) -> None:
        """Replace the region's whole row in one transaction: readers see the old or the new, never half."""
        await self._write(
            "INSERT INTO regions VALUES (?, ?, ?, ?, ?, ?, 1) ON CONFLICT (tenant, name) DO UPDATE SET"
            " script = excluded.script, budget = excluded.budget, options = excluded.options,"
            " entries = excluded.entries, version = regions.version + 1",
            (tenant, name, script, budget, json.dumps(options), json.dumps(entries, ensure_ascii=False)),
        )

    async def load_regions(self) -> list[tuple[str, RegionRow]]:
        """Every persistent region, ``(tenant, row)``."""

        def run(db: sqlite3.Connection) -> list[tuple[str, RegionRow]]:
            rows = db.execute(
                "SELECT tenant, name, script, budget, options, entries, version FROM regions"
                " ORDER BY tenant, name"
            ).fetchall()
            return [
                (r[0], RegionRow(r[1], r[2], r[3], json.loads(r[4]), json.loads(r[5]), r[6])) for r in rows
            ]

        return await self._run(run)

    async def delete_region(self, tenant: str, name: str) -> bool:
        """Whether a persistent region was deleted."""
        return await self._write("DELETE FROM regions WHERE tenant = ? AND name = ?", (tenant, name)) > 0

    # -- provider state and admin-managed tenants --------------------------------------------------

    async def save_provider_state(self, tenant: str, name: str, state: Any) -> None:
        """What the provider's ``initialize`` returned, so an operator can see it after a restart."""
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

    async def put_tenant(self, tenant: str, token_sha256: str) -> None:
        """Add or rotate a tenant managed over the admin API."""
        await self._write("INSERT OR REPLACE INTO tenants VALUES (?, ?)", (tenant, token_sha256))

    async def delete_tenant(self, tenant: str) -> bool:
        """Revoke a tenant managed over the admin API."""
        return await self._write("DELETE FROM tenants WHERE id = ?", (tenant,)) > 0

    def tenants(self) -> dict[str, str]:
        """Admin-managed tenants (synchronous: read at start-up and reload, a handful of rows)."""
        with self._lock:
            return dict(self._db.execute("SELECT id, token_sha256 FROM tenants").fetchall())
