"""The service's durable state: tenants, their scripts, regions and provider tables, in one SQLite file
(the embedded default, one coordinator) or a PostgreSQL database (several coordinators).

Every write commits before it returns (SQLite: ``journal_mode=WAL`` and ``synchronous=FULL``;
PostgreSQL: its commit is durable), so a caller that acknowledges after :class:`Storage` returns
acknowledges only what survives ``kill -9`` and power loss. A write that cannot commit (disk full, I/O
error, a lost connection) is rolled back and raises :class:`StorageFailed` (507 or 503): the caller
changes its memory only after a commit, so memory and database stay as they were. Both engines run the
same statements and the same :data:`MIGRATIONS` (which only ever grow); what differs between them is in
``storage_backends.py``. One connection serves the whole process from one thread (``asyncio.to_thread``
through a lock), which keeps the event loop free of database waits.

A persistent region is stored as one row per entry (``region_entries``, ordered by ``seq``), so a write
costs what changed -- the new entry, the evicted ones -- not the whole region
(:meth:`Storage.change_entries`).

Several coordinators over one database share tenants by **lease** (``leases``: owner, epoch, expiry on
the database's clock). A coordinator serves a tenant only while it holds the lease (:meth:`Storage.acquire`,
renewed by :meth:`Storage.renew`); another takes it only once it expired, and the epoch grows at every
change of owner. Every write for a tenant is fenced: its transaction first reads the lease row at the
epoch its writer holds (``FOR SHARE`` on PostgreSQL, so a take-over waits for the commit) and rolls back
if the epoch moved. A coordinator that lost a tenant -- paused, partitioned -- therefore never overwrites
the new owner's state: its write raises :class:`StorageFailed` (503, "served by another coordinator")
and it drops the tenant (:attr:`Storage.on_lost`). With one coordinator (no ``owner``) nothing is
fenced and no lease is kept.

Past 400 lines because every statement the service runs is here, one short method each, so the
schema and every query that depends on it read in one file.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import secrets
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from coordinator.service.errors import StorageFailed
from coordinator.service.storage_backends import Backend, Db, Dialects, Migrations, open_backend

__all__ = [
    "DROPPED",
    "IDEMPOTENCY_ROW_BYTES",
    "LEASE_SECS",
    "MIGRATIONS",
    "Lease",
    "RegionRow",
    "ScriptRow",
    "ScriptStamp",
    "Storage",
    "StorageFailed",
    "TenantRow",
    "elsewhere",
]

T = TypeVar("T")
log = logging.getLogger("rhaipool.service")

MIGRATIONS: Final[Migrations] = (
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
        Dialects(
            "INSERT INTO region_entries SELECT r.tenant, r.name, CAST(j.key AS INTEGER) + 1, j.value"
            " FROM regions AS r, json_each(r.entries) AS j",
            "INSERT INTO region_entries SELECT r.tenant, r.name, j.n, j.value::text"
            " FROM regions AS r, jsonb_array_elements(r.entries::jsonb) WITH ORDINALITY AS j(value, n)",
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
    (  # 3: which coordinator serves each tenant (several coordinators over one PostgreSQL database)
        (
            "CREATE TABLE leases (tenant TEXT PRIMARY KEY, owner TEXT NOT NULL, epoch INTEGER NOT NULL,"
            " expires_at REAL NOT NULL)"
        ),
        "CREATE INDEX leases_owner ON leases (owner)",
    ),
    (  # 4: where the other coordinators reach a tenant's owner (a mis-routed request is forwarded there)
        "ALTER TABLE leases ADD COLUMN url TEXT NOT NULL DEFAULT ''",
    ),
    (  # 5: what the coordinators share: the key that proves a forward came from one of them
        "CREATE TABLE cluster (name TEXT PRIMARY KEY, value TEXT NOT NULL)",
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
LEASE_SECS: Final = 10.0
IDEMPOTENCY_ROW_BYTES: Final = 128
"""What a kept ``Idempotency-Key`` counts beyond its body, key and request (its row's other fields)."""
DROPPED: Final = "null"
"""``headers`` of a kept key whose answer's body was dropped for its caller's quota (it applied)."""
"""How long a tenant's lease lasts unrenewed (the owner renews it every third of that)."""
_TRUST: Final = 0.8
"""The part of a lease this coordinator serves on after the renewal that began it (clocks drift)."""


class _Moved(StorageFailed):
    """The fence found another epoch: the transaction rolls back."""

    def __init__(self) -> None:
        super().__init__(503, "the tenant's lease moved")


def elsewhere(tenant: str, why: str) -> StorageFailed:
    """The refusal of a tenant this coordinator does not hold (503, ``Retry-After``; nothing changed)."""
    return StorageFailed(
        503, f"tenant {tenant} is served by another coordinator ({why}): nothing changed; retry"
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


@dataclass(frozen=True, slots=True)
class Lease:
    """A tenant's lease: who serves it, the epoch (one more at every change of owner), until when
    (seconds since the epoch, on the database's clock), whether it is this coordinator's, and where
    the other coordinators reach its owner (``[serve] advertise_url``; empty if it did not say)."""

    tenant: str
    owner: str
    epoch: int
    expires_at: float
    mine: bool
    url: str = ""


class Storage:
    """The one door to the database; every method that writes returns once committed.

    ``where`` is a file (SQLite) or a ``postgresql://`` URL. With ``owner`` set (several coordinators
    over one PostgreSQL database), every write for a tenant is fenced by its lease: see the module's
    docstring and :meth:`acquire`.
    """

    def __init__(
        self,
        where: Path | str,
        *,
        owner: str | None = None,
        lease_secs: float = LEASE_SECS,
        url: str = "",
    ) -> None:
        # With leases, a transaction left waiting longer than a lease (this process paused) is ended
        # by the server: its locks on lease rows must not outlive the leases.
        self.backend: Backend = open_backend(where, idle_secs=None if owner is None else lease_secs)
        self.path = where if isinstance(where, Path) else None
        self.where = self.backend.where
        self.owner = owner
        self.lease_secs = lease_secs
        self.url = url
        """Where the other coordinators reach this one: stored with every lease it takes."""
        self.on_lost: Callable[[str], None] = lambda tenant: None
        """Told of a tenant this coordinator dropped because its lease moved (a write was refused, or a
        renewal found another owner)."""
        self._epochs: dict[str, int] = {}
        self._unchecked: dict[str, int] = {}  # caller -> answer bytes kept since its last full count
        self._valid_until: dict[str, float] = {}
        self._nul = self.backend.engine == "postgresql"  # PostgreSQL text holds no NUL character
        self._octets = "octet_length(content)" if self._nul else "length(CAST(content AS BLOB))"
        self._fence = (
            f"SELECT 1 FROM leases WHERE tenant = ? AND owner = ? AND epoch = ?{self.backend.share_lock}"
        )
        try:
            self.migrate()
        except BaseException:
            self.backend.close()
            raise

    def migrate(self) -> int:
        """Apply the migrations the database has not seen, each in its own transaction; the version."""
        return self.backend.migrate(MIGRATIONS)

    def close(self) -> None:
        """Close the connection (SQLite: a checkpoint folds the WAL back into the file)."""
        self.backend.close()

    def _locked(self, fn: Callable[[Db], T], *, transaction: bool) -> T:
        return self.backend.run(fn, transaction=transaction)

    async def _run(self, fn: Callable[[Db], T], *, transaction: bool = False) -> T:
        return await asyncio.to_thread(self.backend.run, fn, transaction=transaction)

    async def _change(self, tenant: str, fn: Callable[[Db], T]) -> T:
        """``fn`` in one transaction; with leases, fenced: it commits only while this coordinator's
        epoch is the tenant's (the check and the change in the same transaction, the lease row locked
        against a concurrent take-over until commit); a refusal drops the tenant."""
        if self.owner is None or tenant.startswith("\x00"):
            return await self._run(fn, transaction=True)
        epoch = self._epochs.get(tenant)
        if epoch is None:
            raise elsewhere(tenant, "this coordinator does not hold its lease")
        owner = self.owner

        def fenced(db: Db) -> T:
            if db.execute(self._fence, (tenant, owner, epoch)).fetchone() is None:
                raise _Moved()
            return fn(db)

        try:
            return await self._run(fenced, transaction=True)
        except _Moved:
            self._drop(tenant, epoch)
            raise elsewhere(
                tenant, f"its lease moved past epoch {epoch}: this coordinator dropped it"
            ) from None

    async def _write(self, tenant: str, statement: str, params: tuple[Any, ...]) -> int:
        if self.owner is None:  # one statement, committed on its own (SQLite's single coordinator)
            return await self._run(lambda db: db.execute(statement, params).rowcount)
        return await self._change(tenant, lambda db: db.execute(statement, params).rowcount)

    def _caller(self, caller: str) -> str:
        """An idempotency slot's caller as the database holds it (the admin's has a NUL in memory)."""
        return caller.replace("\x00", "\x01") if self._nul else caller

    # -- tenant leases -----------------------------------------------------------------------------

    def holds(self, tenant: str) -> bool:
        """Whether this coordinator holds the tenant's lease and its last renewal is recent enough to
        serve on (its expiry, less a margin for clock drift, not passed on this machine's clock)."""
        return tenant in self._epochs and time.monotonic() < self._valid_until.get(tenant, 0.0)

    def epoch(self, tenant: str) -> int | None:
        """The epoch this coordinator holds for the tenant, or None."""
        return self._epochs.get(tenant)

    def held(self) -> list[str]:
        """The tenants whose lease this coordinator holds."""
        return sorted(self._epochs)

    async def acquire(self, tenant: str) -> Lease:
        """Take the tenant's lease if it is free, expired or already this coordinator's (then its
        epoch grows: any write still carrying the old one is refused); otherwise the live owner's.

        One statement: two coordinators asking at once cannot both win.
        """
        owner = self._need_owner()
        now = self.backend.now
        started = time.monotonic()
        row = await self._run(
            lambda db: (
                db.execute(
                    "INSERT INTO leases (tenant, owner, epoch, expires_at, url)"
                    f" VALUES (?, ?, 1, {now} + ?, ?) ON CONFLICT (tenant) DO UPDATE"
                    " SET owner = excluded.owner, epoch = leases.epoch + 1, expires_at = excluded.expires_at,"
                    " url = excluded.url"
                    f" WHERE leases.expires_at < {now} OR leases.owner = excluded.owner"
                    " RETURNING owner, epoch, expires_at, url",
                    (tenant, owner, self.lease_secs, self.url),
                ).fetchone()
                or db.execute(
                    "SELECT owner, epoch, expires_at, url FROM leases WHERE tenant = ?", (tenant,)
                ).fetchone()
            ),
            transaction=True,
        )
        lease = Lease(tenant, str(row[0]), int(row[1]), float(row[2]), str(row[0]) == owner, str(row[3]))
        if lease.mine:
            self._epochs[tenant] = lease.epoch
            self._valid_until[tenant] = started + self.lease_secs * _TRUST
        return lease

    async def renew(self) -> list[str]:
        """Extend every lease this coordinator holds (one statement; one it released -- expiry 0 -- stays
        released even if this renewal began before the release); the tenants it turned out to have
        lost (dropped, :attr:`on_lost` told). A failure raises :class:`StorageFailed` and changes
        nothing: the leases then run out on their own, and :meth:`holds` turns false."""
        owner = self._need_owner()
        before = dict(self._epochs)
        if not before:
            return []
        started = time.monotonic()
        rows = await self._run(
            lambda db: db.execute(
                f"UPDATE leases SET expires_at = {self.backend.now} + ? WHERE owner = ? AND expires_at > 0"
                " RETURNING tenant, epoch",
                (self.lease_secs, owner),
            ).fetchall(),
            transaction=True,
        )
        kept = {str(t): int(e) for t, e in rows}
        lost = []
        for tenant, epoch in before.items():
            if kept.get(tenant) == epoch:
                if self._epochs.get(tenant) == epoch:
                    self._valid_until[tenant] = started + self.lease_secs * _TRUST
            elif self._epochs.get(tenant) == epoch:
                self._drop(tenant, epoch)
                lost.append(tenant)
        return lost

    async def release(self, tenants: Iterable[str] | None = None) -> None:
        """Give up these leases (all when None), expiring them now so that another coordinator takes
        them at once (a clean stop); this coordinator stops holding them first."""
        owner = self._need_owner()
        gone = {
            t: self._epochs.pop(t)
            for t in (list(self._epochs) if tenants is None else tenants)
            if t in self._epochs
        }
        for tenant in gone:
            self._valid_until.pop(tenant, None)
        if gone:
            await self._run(
                lambda db: db.executemany(
                    "UPDATE leases SET expires_at = 0 WHERE tenant = ? AND owner = ? AND epoch = ?",
                    [(t, owner, e) for t, e in gone.items()],
                ),
                transaction=True,
            )

    async def lease(self, tenant: str) -> Lease | None:
        """The tenant's lease as the database has it (who owns it, until when on the database's clock)."""
        row = await self._run(
            lambda db: db.execute(
                "SELECT owner, epoch, expires_at, url FROM leases WHERE tenant = ?", (tenant,)
            ).fetchone()
        )
        if row is None:
            return None
        return Lease(tenant, str(row[0]), int(row[1]), float(row[2]), row[0] == self.owner, str(row[3]))

    def cluster_key(self) -> bytes:
        """The key the coordinators over this database share (made by the first to ask; synchronous:
        start-up). Whoever reads the database can read it: it proves only that a request was forwarded
        by a coordinator, not by a client writing the forward's headers itself."""
        made = secrets.token_hex(32)

        def run(db: Db) -> str:
            db.execute("INSERT INTO cluster VALUES ('forward_key', ?) ON CONFLICT DO NOTHING", (made,))
            return str(db.execute("SELECT value FROM cluster WHERE name = 'forward_key'").fetchone()[0])

        return bytes.fromhex(self._locked(run, transaction=True))

    async def ping(self) -> None:
        """One round trip to the database (StorageFailed when it cannot be reached)."""
        await self._run(lambda db: db.execute("SELECT 1").fetchone())

    def _need_owner(self) -> str:
        if self.owner is None:
            raise RuntimeError("leases need Storage(owner=...): this storage serves one coordinator")
        return self.owner

    def _drop(self, tenant: str, epoch: int) -> None:
        if self._epochs.get(tenant) != epoch:
            return
        del self._epochs[tenant]
        self._valid_until.pop(tenant, None)
        log.warning(
            "tenant %s dropped: its lease moved past epoch %d (another coordinator owns it)", tenant, epoch
        )
        self.on_lost(tenant)

    # -- scripts -----------------------------------------------------------------------------------

    async def put_script(self, tenant: str, kind: str, name: str, content: str) -> ScriptRow:
        """Insert or replace; durable when this returns."""
        row = ScriptRow(kind, name, content, hashlib.sha256(content.encode()).hexdigest(), time.time())
        await self._write(
            tenant,
            "INSERT INTO scripts VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT (tenant, kind, name) DO UPDATE"
            " SET content = excluded.content, sha256 = excluded.sha256, updated_at = excluded.updated_at",
            (tenant, kind, name, content, row.sha256, row.updated_at),
        )
        return row

    async def get_script(self, tenant: str, kind: str, name: str) -> ScriptRow | None:
        """The stored script, or None."""

        def run(db: Db) -> ScriptRow | None:
            found = db.execute(
                "SELECT kind, name, content, sha256, updated_at FROM scripts"
                " WHERE tenant = ? AND kind = ? AND name = ?",
                (tenant, kind, name),
            ).fetchone()
            return None if found is None else ScriptRow(*found)

        return await self._run(run)

    async def list_scripts(self, tenant: str) -> list[ScriptRow]:
        """One tenant's scripts, sorted by kind then name."""

        def run(db: Db) -> list[ScriptRow]:
            rows = db.execute(
                "SELECT kind, name, content, sha256, updated_at FROM scripts WHERE tenant = ?"
                " ORDER BY kind, name",
                (tenant,),
            ).fetchall()
            return [ScriptRow(*r) for r in rows]

        return await self._run(run)

    def script_stamps(self, tenant: str | None = None) -> list[tuple[str, str, str, ScriptStamp]]:
        """``(tenant, kind, name, stamp)`` of every stored script, or of one tenant's (synchronous: read
        once at start-up, or when a coordinator takes a tenant)."""
        where, params = ("", ()) if tenant is None else (" WHERE tenant = ?", (tenant,))

        def run(db: Db) -> list[tuple[str, str, str, ScriptStamp]]:
            rows = db.execute(
                f"SELECT tenant, kind, name, sha256, {self._octets} FROM scripts{where}", params
            ).fetchall()
            return [(t, k, n, ScriptStamp(s, int(size))) for t, k, n, s, size in rows]

        return self._locked(run, transaction=False)

    async def delete_script(self, tenant: str, kind: str, name: str) -> bool:
        """Whether a script was deleted."""
        return (
            await self._write(
                tenant, "DELETE FROM scripts WHERE tenant = ? AND kind = ? AND name = ?", (tenant, kind, name)
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

        def run(db: Db) -> None:
            db.execute(
                "INSERT INTO regions VALUES (?, ?, ?, ?, ?, '[]', 1) ON CONFLICT (tenant, name) DO UPDATE"
                " SET script = excluded.script, budget = excluded.budget, options = excluded.options,"
                " entries = '[]', version = 1",
                (tenant, name, script, budget, json.dumps(options)),
            )
            db.execute("DELETE FROM region_entries WHERE tenant = ? AND region = ?", (tenant, name))
            _insert_entries(db, tenant, name, entries)

        await self._change(tenant, run)

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

        def run(db: Db) -> None:
            if rewrite:
                db.execute("DELETE FROM region_entries WHERE tenant = ? AND region = ?", (tenant, name))
            elif gone:
                db.executemany("DELETE FROM region_entries WHERE tenant = ? AND region = ? AND seq = ?", gone)
            _insert_entries(db, tenant, name, added)
            db.execute(
                "UPDATE regions SET version = version + 1 WHERE tenant = ? AND name = ?", (tenant, name)
            )

        await self._change(tenant, run)

    def load_regions(self, tenant: str) -> list[RegionRow | str]:
        """One tenant's persistent regions; a row that cannot be read is a one-line problem instead."""

        def run(db: Db) -> list[RegionRow | str]:
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

        def run(db: Db) -> bool:
            db.execute("DELETE FROM region_entries WHERE tenant = ? AND region = ?", (tenant, name))
            return (
                db.execute("DELETE FROM regions WHERE tenant = ? AND name = ?", (tenant, name)).rowcount > 0
            )

        return await self._change(tenant, run)

    # -- provider state and tables -----------------------------------------------------------------

    async def save_provider_state(self, tenant: str, name: str, state: Any) -> None:
        """What the provider's ``initialize`` returned (placeholders, never secret values), for operators."""
        await self._write(
            tenant,
            "INSERT INTO provider_state VALUES (?, ?, ?, ?) ON CONFLICT (tenant, name) DO UPDATE"
            " SET state = excluded.state, updated_at = excluded.updated_at",
            (tenant, name, json.dumps(state, default=repr), time.time()),
        )

    async def provider_state(self, tenant: str, name: str) -> Any:
        """The last stored state, or None."""

        def run(db: Db) -> Any:
            found = db.execute(
                "SELECT state FROM provider_state WHERE tenant = ? AND name = ?", (tenant, name)
            ).fetchone()
            return None if found is None else json.loads(found[0])

        return await self._run(run)

    async def put_provider_table(self, tenant: str, name: str, sealed: str) -> None:
        """A tenant's own provider table, sealed (``secrets.py``) as the caller gives it."""
        await self._write(
            tenant,
            "INSERT INTO provider_tables VALUES (?, ?, ?, ?) ON CONFLICT (tenant, name) DO UPDATE"
            " SET sealed = excluded.sealed, updated_at = excluded.updated_at",
            (tenant, name, sealed, time.time()),
        )

    async def delete_provider_table(self, tenant: str, name: str) -> bool:
        """Whether the tenant had that table."""
        return (
            await self._write(
                tenant, "DELETE FROM provider_tables WHERE tenant = ? AND name = ?", (tenant, name)
            )
            > 0
        )

    def provider_tables(self, tenant: str | None = None) -> list[tuple[str, str, str]]:
        """``(tenant, name, sealed)`` of every tenant's provider table, or of one tenant's (synchronous:
        start-up, or when a coordinator takes a tenant)."""
        where, params = ("", ()) if tenant is None else (" WHERE tenant = ?", (tenant,))
        return self._locked(
            lambda db: db.execute(
                f"SELECT tenant, name, sealed FROM provider_tables{where}", params
            ).fetchall(),
            transaction=False,
        )

    # -- tenants managed over the admin API --------------------------------------------------------

    async def put_tenant(self, tenant: str, token_sha256: str) -> None:
        """Add a tenant, rotate its token, or reinstate a revoked one."""
        await self._run(
            lambda db: db.execute(
                "INSERT INTO tenants VALUES (?, ?, NULL) ON CONFLICT (id) DO UPDATE"
                " SET token_sha256 = excluded.token_sha256, revoked_at = NULL",
                (tenant, token_sha256),
            )
        )

    async def revoke_tenant(self, tenant: str, now: float) -> bool:
        """Mark an API tenant revoked (its token stops working; its data is kept); whether it was active."""
        return (
            await self._run(
                lambda db: (
                    db.execute(
                        "UPDATE tenants SET revoked_at = ? WHERE id = ? AND revoked_at IS NULL", (now, tenant)
                    ).rowcount
                )
            )
            > 0
        )

    async def purge_tenant(self, tenant: str) -> None:
        """Remove everything stored for ``tenant`` (its row included), in one transaction. Its lease,
        if any, moves to the next epoch and expires: the coordinator serving it (this one or another)
        has its next write refused and drops the tenant, so nothing it holds in memory comes back."""

        def run(db: Db) -> None:
            for table in _TENANT_TABLES:
                db.execute(f"DELETE FROM {table} WHERE tenant = ?", (tenant,))
            db.execute("DELETE FROM tenants WHERE id = ?", (tenant,))
            db.execute("UPDATE leases SET epoch = epoch + 1, expires_at = 0 WHERE tenant = ?", (tenant,))

        await self._run(run, transaction=True)
        self._epochs.pop(tenant, None)  # this coordinator's epoch is stale now: it holds the tenant no more
        self._valid_until.pop(tenant, None)

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

        def run(db: Db) -> list[str]:
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
                (self._caller(tenant), key),
            ).fetchone()
        )
        return None if found is None else (found[0], int(found[1]), found[2], bytes(found[3]))

    async def claim_idempotency_key(self, tenant: str, key: str, request: str, expire_before: float) -> bool:
        """Record that a request with this key starts (status 0: no answer yet), forgetting keys older
        than ``expire_before``; False when the key is already recorded."""

        caller = self._caller(tenant)

        def run(db: Db) -> bool:
            db.execute("DELETE FROM idempotency WHERE created_at < ?", (expire_before,))
            return (
                db.execute(
                    "INSERT INTO idempotency VALUES (?, ?, ?, 0, '[]', ?, ?) ON CONFLICT DO NOTHING",
                    (caller, key, request, b"", time.time()),
                ).rowcount
                == 1
            )

        return await self._change(tenant, run)

    async def save_idempotent_answer(
        self, tenant: str, key: str, status: int, headers: str, body: bytes, limit: int
    ) -> None:
        """The answer given for a claimed key, within ``limit`` bytes of the caller's kept keys (each
        key's body, key and request, plus ``IDEMPOTENCY_ROW_BYTES``): past it, the oldest answers lose
        their bodies (``headers`` becomes ``DROPPED``: the key still says its request applied), then the
        oldest answered keys go. An answer over the limit on its own is kept without its body.

        The caller's keys are counted in full (a scan of its rows) only once an eighth of ``limit`` was
        kept since the last count, so a write costs O(1) amortised and the bytes kept stay under
        ``limit`` plus that eighth (and the request fingerprints of the keys saved in between)."""
        caller = self._caller(tenant)
        own = len(body) + len(key) + IDEMPOTENCY_ROW_BYTES
        since = self._unchecked.get(caller)
        due = since is None or since + own > limit // 8
        self._unchecked[caller] = 0 if due or since is None else since + own  # before any await: saves add up

        def run(db: Db) -> None:
            kept = (status, headers, body) if own <= limit else (status, DROPPED, b"")
            db.execute(
                "UPDATE idempotency SET status = ?, headers = ?, body = ? WHERE tenant = ? AND key = ?",
                (*kept, caller, key),
            )
            if not due:
                return
            total = int(
                db.execute(
                    "SELECT COALESCE(SUM(length(body) + length(key) + length(request)), 0) + COUNT(*) * ?"
                    " FROM idempotency WHERE tenant = ?",
                    (IDEMPOTENCY_ROW_BYTES, caller),
                ).fetchone()[0]
            )
            if total <= limit:
                return
            oldest = db.execute(
                "SELECT key, length(body), length(key) + length(request) FROM idempotency"
                " WHERE tenant = ? AND status <> 0 AND key <> ? ORDER BY created_at",
                (caller, key),
            ).fetchall()
            dropped, gone = [], []
            for name, size, _ in oldest:  # answers first: their keys still refuse a second run
                if total <= limit:
                    break
                if size:
                    dropped.append((DROPPED, b"", caller, name))
                    total -= int(size)
            for name, _, rest in oldest:  # then whole keys, oldest first
                if total <= limit:
                    break
                gone.append((caller, name))
                total -= int(rest) + IDEMPOTENCY_ROW_BYTES
            drop = "UPDATE idempotency SET headers = ?, body = ? WHERE tenant = ? AND key = ?"
            db.executemany(drop, dropped)
            db.executemany("DELETE FROM idempotency WHERE tenant = ? AND key = ?", gone)

        try:
            await self._change(tenant, run)
        except BaseException:
            self._unchecked.pop(caller, None)  # the next save counts in full
            raise

    async def release_idempotency_key(self, tenant: str, key: str) -> None:
        """Forget a claimed key whose request applied nothing (a 5xx), so that a retry runs."""
        await self._write(
            tenant,
            "DELETE FROM idempotency WHERE tenant = ? AND key = ? AND status = 0",
            (self._caller(tenant), key),
        )


def _insert_entries(db: Db, tenant: str, name: str, entries: Iterable[tuple[int, Any]]) -> None:
    db.executemany(
        "INSERT INTO region_entries VALUES (?, ?, ?, ?)",
        [(tenant, name, seq, json.dumps(entry)) for seq, entry in entries],
    )
