"""The running service: pool, egress, storage, tenants and their scripts, regions and provider runtimes.

    HTTP routes ──▶ Service ──┬── Storage (SQLite: tenants, scripts, regions, provider tables and state)
                              ├── ScriptIndex (each stored script's sha256 and size, in memory)
                              ├── RegionBook ──▶ open_region(pool, …, source=, tenant=)
                              ├── ProviderRuntime per tenant ──▶ PoolExecutor(pool) + the shared Egress
                              └── Validator ──▶ pool.load (compile in a sandboxed worker)

The database is the truth, and the only copy of a tenant's scripts: runtimes read a script's text from
it (:class:`TenantScripts`) when its sha256 in the index changed, so nothing a tenant names becomes a
file. Every change commits first and then changes memory; a refusal (quota, storage) leaves both as
they were. Tenants have one source of truth each: the config file's ``[tenants.<id>]`` tables, read-only
here, or the database's rows that the admin API writes; a token outside the current set never works.

Past 400 lines: it is the one place that holds a tenant's whole life (tokens, limits, scripts,
provider tables, revocation); each section is short and splitting them would pass the same maps around.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import socket
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import fields, replace
from typing import Any

from coordinator._core.config import TenantQuotas
from coordinator._core.pool import Pool
from coordinator.egress import Egress, EgressQuota
from coordinator.nodes.link import NodeListener
from coordinator.providers import PoolExecutor, ProviderRuntime
from coordinator.providers.config import (
    ProviderConfigError,
    ProviderTable,
    parse_provider_table,
    redacted_table,
)
from coordinator.providers.ratelimit import SharedLimiters
from coordinator.service.auth import Tokens
from coordinator.service.config import ServeConfig, ServiceConfigError, TenantLimits, load_service_config
from coordinator.service.errors import LimitReached, RouteError
from coordinator.service.forward import Forwarder, advertised
from coordinator.service.handover import Handovers
from coordinator.service.membership import live_coordinators
from coordinator.service.regions import RegionBook
from coordinator.service.secrets import Sealer, SecretsUnavailable
from coordinator.service.storage import Lease, ScriptRow, ScriptStamp, Storage, StorageFailed
from coordinator.service.validation import Validator

__all__ = ["Service", "TenantScripts"]

log = logging.getLogger("rhaipool.service")

_CONFIG_CHECK_SECS = 1.0
_DAY = 86_400.0
_RETENTION_CHECK_SECS = 3600.0
"""How often revoked tenants are looked at for a retention that ran out (more often if it is shorter)."""


class TenantScripts:
    """One tenant's stored provider scripts as the provider runtime reads them (its ``ScriptSource``)."""

    def __init__(self, service: Service, tenant: str) -> None:
        self._service, self._tenant = service, tenant

    def version(self, name: str) -> str | None:
        """The script's sha256, or None when the tenant stores no provider of that name."""
        stamp = self._service.scripts(self._tenant).get(("provider", name))
        return None if stamp is None else stamp.sha256

    async def read(self, name: str) -> str | None:
        """Its text, from the database."""
        row = await self._service.storage.get_script(self._tenant, "provider", name)
        return None if row is None else row.content


class Service:
    """Everything a request handler needs; :meth:`start` and :meth:`stop` bracket the ASGI lifespan."""

    def __init__(self, config: ServeConfig, *, pool_options: dict[str, Any] | None = None) -> None:
        self.config = config
        self.pool_options = pool_options or {}
        self.started_at = time.time()
        self.tokens = Tokens({}, None)
        self.pool: Pool
        self.egress: Egress
        self.storage: Storage
        self.regions: RegionBook
        self.validator: Validator
        self.sealer = Sealer(None)
        self.on_revoked: Callable[[frozenset[str]], None] = lambda tenants: None
        """Told of tenants whose token stopped working (the gate ends their requests in flight)."""
        self._runtimes: dict[str, ProviderRuntime] = {}
        self._scripts: dict[str, dict[tuple[str, str], ScriptStamp]] = {}
        self._tables: dict[str, dict[str, ProviderTable]] = {}
        self._table_bytes: dict[str, dict[str, int]] = {}
        """The size of each of a tenant's own provider tables, as JSON (``max_provider_table_bytes``)."""
        self._api_tenants: dict[str, str] = {}
        self._revoked: dict[str, float] = {}
        self._saved_loads: dict[tuple[str, str], Any] = {}
        self._streams: dict[str, int] = {}
        self._config_stamp: Any = None
        self._config_checked = 0.0
        self.leased = config.database_url is not None
        """Several coordinators share the database: this one serves a tenant only under its lease."""
        self.database_reachable = True
        """False while lease renewals fail (readiness turns false: the database is partitioned off)."""
        self._owning: dict[str, asyncio.Lock] = {}
        self._loading: set[str] = set()
        """Tenants whose lease is taken and whose state is still being read from the database: the
        lease alone does not make them servable (``own``'s unlocked path must not see them as ready)."""
        self._tenant_rows = asyncio.Lock()  # an admin change and a refresh from the database, one at a time
        self._renewer: asyncio.Task[None] | None = None
        self._retainer: asyncio.Task[None] | None = None
        self.forwarder: Forwarder | None = None
        """With several coordinators: the pooled client that forwards a request to its tenant's owner."""
        self.handovers = Handovers(b"", "", config.lease_secs)
        """With several coordinators: the tenants handed over to the coordinator their requests arrive at."""
        self.shared_limits = SharedLimiters(lambda name, table: self.config.providers.table(name) == table)
        """The rate limits of the operator's tables, shared by the tenants granted them (and divided
        among the live coordinators: :meth:`_divide_shared_limits`)."""

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the database, start the pool, index the scripts, restore persistent regions."""
        self.sealer = Sealer.from_key_file(self.config.secrets_key_file)
        if self.config.database_url is None:
            self.storage = Storage(self.config.database)
        else:
            owner = f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
            self.storage = Storage(
                self.config.database_url,
                owner=owner,
                lease_secs=self.config.lease_secs,
                url=advertised(self.config),
            )
            self.storage.on_lost = self._drop_tenant
            self.handovers = Handovers(self.storage.cluster_key(), owner, self.config.lease_secs)
            links = self.config.connections
            read_secs = max(self.config.providers.call_timeout_secs, links.body_timeout_secs) + 30.0
            self.forwarder = Forwarder(
                owner,
                self.handovers.proof,
                read_secs,
                links.max_connections_per_address,
                links.idle_timeout_secs,
            )
            await self.forwarder.start()
        self._load_tenants()
        self._config_stamp = self._stamp()
        options = {"workers": self.config.workers, **self.pool_options}
        if self.config.local_workers is not None:
            options["workers"] = self.config.local_workers
            options.setdefault("spares", min(1, self.config.local_workers))  # 0: no local spare either
        nodes = None if self.config.nodes is None else NodeListener.from_config(self.config.nodes)
        self.pool = await Pool(**options, nodes=nodes).__aenter__()
        self.egress = await Egress().__aenter__()
        self.validator = Validator(self.pool)
        if not self.leased:  # one coordinator: every tenant's state now (several: at its first request)
            for tenant, kind, name, stamp in self.storage.script_stamps():
                self._scripts.setdefault(tenant, {})[(kind, name)] = stamp
            await self._load_tables()
        self._apply_limits()
        self.regions = RegionBook(self.pool, self.storage, self._region_source, self.limits)
        if not self.leased:
            for problem in await self.regions.restore():
                log.warning("%s", problem)
        await self._expire_revoked()
        if self.leased:
            self._renewer = asyncio.create_task(self._renew_leases(), name="rhaipool-leases")
        self._retainer = asyncio.create_task(self._retention(), name="rhaipool-retention")

    async def stop(self) -> None:
        """Stop the pool and egress; give up the tenants' leases (the other coordinators take them at
        once); close the database."""
        if self._retainer is not None:
            self._retainer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._retainer
        if self._renewer is not None:
            self._renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._renewer
            with contextlib.suppress(StorageFailed):
                await self.storage.release()
        if self.forwarder is not None:
            await self.forwarder.aclose()
        await self.pool.aclose()
        await self.egress.aclose()
        self.storage.close()

    # -- tenant leases (several coordinators over one database) ----------------------------------

    async def own(self, tenant: str) -> Lease | None:
        """Make sure this coordinator may serve ``tenant``: it holds the tenant's lease (taken now if it
        is free or expired) and the tenant's scripts, provider tables and regions are loaded from the
        database (at its first request here); then None. With one coordinator, nothing to do. When
        another live coordinator holds the lease, its lease (who, and where it is reached: the gate
        forwards the request there). Raises :class:`StorageFailed` (503) when the database cannot be
        reached (then nothing is served from memory that might be stale)."""
        if not self.leased or (self.storage.holds(tenant) and tenant not in self._loading):
            return None
        async with self._owning.setdefault(tenant, asyncio.Lock()):
            if self.storage.holds(tenant):  # under the lock, loading is over
                return None
            if self.storage.epoch(tenant) is not None:  # held, but its renewal is overdue: renew first
                await self.storage.renew()
                if self.storage.holds(tenant):
                    return None
            self._loading.add(tenant)  # before the lease: once it is ours, others wait on the lock
            try:
                lease = await self._acquire(tenant)
                if not lease.mine:
                    return lease
                if lease.epoch > 1:  # it had an owner (handed over, failed, stopped): it stays a while
                    self.handovers.hold(tenant)
                try:
                    await self._load_tenant(tenant)
                except BaseException:
                    self._drop_tenant(tenant)
                    with contextlib.suppress(StorageFailed):
                        await self.storage.release([tenant])
                    raise
            finally:
                self._loading.discard(tenant)
        return None

    async def _acquire(self, tenant: str) -> Lease:
        """The tenant's lease, taken if it is free -- except for a moment after this coordinator handed
        the tenant over: then the new owner takes it (``handover.py``), and only if nobody does within
        ``TAKE_BACK_SECS`` is it taken back here."""
        released = self.handovers.just_released(tenant)
        while released is not None:
            lease = await self.storage.lease(tenant)
            if lease is None or lease.epoch != released.epoch:
                break  # purged, or taken: acquire tells by whom
            await asyncio.sleep(0.05)
            released = self.handovers.just_released(tenant)
        return await self.storage.acquire(tenant)

    async def hand_over(self, tenant: str, to: str) -> None:
        """Give the tenant up for coordinator ``to`` (its calls here have ended, none is admitted):
        the lease released at its epoch, as a clean stop does, and the tenant's state forgotten."""
        epoch = self.storage.epoch(tenant)
        if epoch is None:
            return
        self.handovers.released(tenant, epoch)
        try:
            await self.storage.release([tenant])
        finally:
            self._drop_tenant(tenant)
        log.warning("tenant %s: handed over to %s at epoch %d", tenant, to, epoch)

    async def _load_tenant(self, tenant: str) -> None:
        """A tenant newly owned: its state from the database (what memory held of it is dropped)."""
        self._drop_tenant(tenant)
        for _, kind, name, stamp in await asyncio.to_thread(self.storage.script_stamps, tenant):
            self._scripts.setdefault(tenant, {})[(kind, name)] = stamp
        await self._load_tables(tenant)
        for problem in await self.regions.restore_tenant(tenant):
            log.warning("%s", problem)
        log.info("tenant %s: served here from epoch %s", tenant, self.storage.epoch(tenant))

    def _drop_tenant(self, tenant: str) -> None:
        """Forget a tenant another coordinator serves now (its rows are the new owner's)."""
        self.handovers.forget(tenant)
        self._scripts.pop(tenant, None)
        self._forget_tables(tenant)
        self._forget(tenant)

    async def _renew_leases(self) -> None:
        """Renew the leases every third of their length; a failure leaves them to run out, and this
        coordinator stops serving those tenants (and readiness turns false) until the database answers."""
        while True:
            await asyncio.sleep(self.storage.lease_secs / 3)
            try:
                if self.storage.held():
                    await self.storage.renew()
                await self._refresh_api_tenants()
                await self._divide_shared_limits()
            except StorageFailed as exc:
                if self.database_reachable:
                    log.warning("database unreachable, leases not renewed: %s", exc.error)
                self.database_reachable = False
            else:
                self.database_reachable = True

    async def _divide_shared_limits(self) -> None:
        """The operator's rate limits take this coordinator's share among the live ones (read at every
        renewal, so a coordinator that joins or leaves re-divides them within a renewal period)."""
        membership = await live_coordinators(self.storage)
        if (membership.rank, membership.count) != (self.shared_limits.rank, self.shared_limits.count):
            log.info(
                "shared rate limits: this coordinator's share is %d of %d", membership.rank, membership.count
            )
        self.shared_limits.divide(membership.rank, membership.count)

    # -- configuration ---------------------------------------------------------------------------

    def _stamp(self) -> Any:
        if self.config.source is None:
            return None
        try:
            st = self.config.source.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def limits(self, tenant: str) -> TenantLimits:
        """The tenant's limits as the config says now."""
        return self.config.limits(tenant)

    def reload(self) -> None:
        """Re-read the config file (tenants, tokens, grants, limits, provider tables); the last good one
        stays on error (ValueError)."""
        old = self.config
        if old.source is not None:
            self._config_stamp = self._stamp()
            new = load_service_config(old.source)
            self.config = replace(new, database=old.database, database_url=old.database_url)  # not live
        try:
            self._load_tenants()
            self._apply_limits()
        except ValueError:
            self.config = old
            self._load_tenants()
            self._apply_limits()
            raise
        for tenant, runtime in self._runtimes.items():
            runtime.set_config(self._provider_config(tenant))

    def maybe_reload(self) -> None:
        """At most once a second: reload when the config file changed (token rotation without a signal)."""
        now = time.monotonic()
        if now - self._config_checked < _CONFIG_CHECK_SECS:
            return
        self._config_checked = now
        if self._stamp() != self._config_stamp:
            try:
                self.reload()
            except ValueError as exc:
                log.warning("config reload failed, keeping the last good configuration: %s", exc)

    def _apply_limits(self) -> None:
        """Hand the tenants' pool and egress quotas to the pool and egress (start-up, reload, a tenant
        added): the defaults, and the tenants whose own table overrides them (costs those, not all)."""
        config = self.config
        overrides = config.tenant_limits
        self.pool.set_tenant_quotas(
            _pool_quotas(config.tenant_defaults), {t: _pool_quotas(lim) for t, lim in overrides.items()}
        )
        self.egress.set_tenant_quotas(
            _egress_quotas(config.tenant_defaults), {t: _egress_quotas(lim) for t, lim in overrides.items()}
        )
        everyone = config.tenant_defaults.dedicated_workers > 0  # then every tenant has workers of its own
        tenants = sorted(set(config.tenants) | set(self._api_tenants)) if everyone else sorted(overrides)
        limits = {t: config.limits(t) for t in tenants}
        dedicated = {t: lim.dedicated_workers for t, lim in limits.items() if lim.dedicated_workers}
        groups = {t: lim.node_group for t, lim in limits.items() if lim.node_group and t in dedicated}
        if (dedicated, groups) != self.pool.dedicated():
            try:
                self.pool.set_dedicated(dedicated, groups)
            except ValueError as exc:
                raise ServiceConfigError(f"dedicated_workers: {exc}") from None

    # -- tenants ---------------------------------------------------------------------------------

    def _load_tenants(self) -> None:
        """The token table from the config file's tenants and the database's active ones.

        A config-file tenant takes over the admin-API row of its id (an API tenant moved into the file
        keeps its data), except a revoked one's: that data waits for its purge, and a tenant the file
        defines anew (a new token, maybe someone else) must not inherit it, so the config is refused
        (:class:`ServiceConfigError`: at a reload the last good one stays) until the purge.
        """
        revoked = sorted(r.id for r in self.storage.tenants() if r.revoked_at is not None)
        taken = [tenant for tenant in revoked if tenant in self.config.tenants]
        if taken:
            raise ServiceConfigError(
                f"[tenants.{taken[0]}]: tenant '{taken[0]}' was revoked over the admin API and its data is "
                f"kept until it is purged; purge it first (rhaipool tenants purge {taken[0]}) or give the "
                "config file's tenant another id"
            )
        owned = self.storage.forget_tenant_rows(self.config.tenants)
        for tenant in owned:
            log.warning("tenant %s is defined in the config file: its admin-API row was dropped", tenant)
        rows = self.storage.tenants()
        self._api_tenants = {r.id: r.token_sha256 for r in rows if r.revoked_at is None}
        self._revoked = {r.id: r.revoked_at for r in rows if r.revoked_at is not None}
        self._set_tokens()

    async def _refresh_api_tenants(self) -> None:
        """Several coordinators: the admin API's tenants as the database has them now (another
        coordinator may have added, rotated or revoked one): tokens follow within a renewal period."""
        async with self._tenant_rows:
            await self._refresh_api_tenants_now()

    async def _refresh_api_tenants_now(self) -> None:
        rows = await asyncio.to_thread(self.storage.tenants)
        mine = self.config.tenants
        api = {r.id: r.token_sha256 for r in rows if r.revoked_at is None and r.id not in mine}
        revoked = {r.id: r.revoked_at for r in rows if r.revoked_at is not None and r.id not in mine}
        if api == self._api_tenants and revoked == self._revoked:
            return
        gone = set(self._api_tenants) - set(api)
        self._api_tenants, self._revoked = api, revoked
        self._set_tokens()
        self._apply_limits()
        for tenant in gone:
            self._drop_tenant(tenant)
        if gone:
            await self.storage.release(gone)

    def _set_tokens(self) -> None:
        before = self.tokens.tenants
        self.tokens = Tokens({**self._api_tenants, **self.config.tenants}, self.config.admin_token_sha256)
        self.tokens.add_reader(self.config.metrics_token_sha256)
        gone = before - self.tokens.tenants
        if gone:
            self.on_revoked(frozenset(gone))

    def tenant_rows(self) -> list[dict[str, Any]]:
        """Every tenant the service knows, for the admin: its id, source and whether it is revoked."""
        rows = [{"id": t, "source": "config", "revoked": False} for t in self.config.tenants]
        rows += [{"id": t, "source": "api", "revoked": False} for t in self._api_tenants]
        rows += [{"id": t, "source": "api", "revoked": True} for t in self._revoked]
        return sorted(rows, key=lambda r: str(r["id"]))

    def _config_owned(self, tenant: str) -> None:
        if tenant in self.config.tenants:
            raise RouteError(
                409,
                f"tenant '{tenant}' is defined in the config file ([tenants.{tenant}]): change it there "
                "and reload (SIGHUP); the admin API manages only tenants it added",
            )

    async def put_tenant(self, tenant: str, token_sha256: str) -> bool:
        """Add an API tenant, rotate its token or reinstate it; whether it is new (or was revoked)."""
        async with self._tenant_rows:
            return await self._put_tenant(tenant, token_sha256)

    async def _put_tenant(self, tenant: str, token_sha256: str) -> bool:
        self._config_owned(tenant)
        fresh = tenant not in self._api_tenants
        await self.storage.put_tenant(tenant, token_sha256)
        self._api_tenants[tenant] = token_sha256
        reinstated = self._revoked.pop(tenant, None) is not None
        if reinstated and (not self.leased or self.storage.holds(tenant)):
            for problem in await self.regions.restore_tenant(tenant):
                log.warning("%s", problem)
        self._set_tokens()
        self._apply_limits()
        return fresh

    async def revoke_tenant(self, tenant: str, *, purge: bool) -> None:
        """Revoke an API tenant (its calls stop now; its data is kept for the retention) or purge it."""
        async with self._tenant_rows:
            await self._revoke_tenant(tenant, purge=purge)

    async def _revoke_tenant(self, tenant: str, *, purge: bool) -> None:
        self._config_owned(tenant)
        if tenant not in self._api_tenants and tenant not in self._revoked:
            raise RouteError(404, f"No such tenant: {tenant}")
        if purge:
            await self.storage.purge_tenant(tenant)
            self._revoked.pop(tenant, None)
            self._scripts.pop(tenant, None)
            self._forget_tables(tenant)
        else:
            now = time.time()
            if await self.storage.revoke_tenant(tenant, now):
                self._revoked[tenant] = now
        self._api_tenants.pop(tenant, None)
        self._set_tokens()
        self._forget(tenant)

    def _forget(self, tenant: str) -> None:
        """Drop what memory holds of a tenant that cannot call any more (its rows stay unless purged)."""
        self.regions.forget_tenant(tenant)
        self._runtimes.pop(tenant, None)
        for key in [k for k in self._saved_loads if k[0] == tenant]:
            del self._saved_loads[key]

    async def _retention(self) -> None:
        """Purge revoked tenants whose retention ran out while the service runs: every hour, or four
        times per retention when it is shorter (a service that runs for months still honours it)."""
        while True:
            await asyncio.sleep(min(_RETENTION_CHECK_SECS, self.config.tenant_retention_days * _DAY / 4))
            try:
                async with self._tenant_rows:
                    await self._expire_revoked()
            except StorageFailed as exc:
                log.warning("revoked tenants past their retention not purged yet: %s", exc.error)

    async def _expire_revoked(self) -> None:
        """Purge revoked tenants whose retention ran out (at start-up, then by :meth:`_retention`)."""
        deadline = time.time() - self.config.tenant_retention_days * _DAY
        for tenant, at in list(self._revoked.items()):
            if at < deadline:
                log.warning(
                    "tenant %s: revoked %s days ago, its data is purged",
                    tenant,
                    self.config.tenant_retention_days,
                )
                await self.storage.purge_tenant(tenant)
                self._revoked.pop(tenant, None)
                self._scripts.pop(tenant, None)
                self._forget_tables(tenant)

    # -- scripts ---------------------------------------------------------------------------------

    def scripts(self, tenant: str) -> dict[tuple[str, str], ScriptStamp]:
        """The tenant's stored scripts by ``(kind, name)`` (in memory: no query)."""
        return self._scripts.get(tenant, {})

    def script_bytes(self, tenant: str) -> int:
        """Bytes of scripts the tenant stores."""
        return sum(s.size for s in self.scripts(tenant).values())

    async def put_script(self, tenant: str, kind: str, name: str, content: str) -> ScriptRow:
        """Store durably (within the tenant's script quotas), then index."""
        limits = self.limits(tenant)
        own = self.scripts(tenant)
        old = own.get((kind, name))
        try:
            size = len(content.encode("utf-8"))
        except UnicodeEncodeError:
            raise RouteError(400, "script content is not valid Unicode (a lone surrogate)") from None
        if old is None and len(own) >= limits.max_scripts:
            raise LimitReached("max_scripts", f"the tenant already stores {limits.max_scripts} scripts")
        total = self.script_bytes(tenant) - (old.size if old else 0) + size
        if total > limits.max_script_bytes:
            raise LimitReached(
                "max_script_bytes",
                f"the tenant's scripts would take {total} bytes, over its {limits.max_script_bytes}",
                status=413,
            )
        row = await self.storage.put_script(tenant, kind, name, content)
        self._scripts.setdefault(tenant, {})[(kind, name)] = ScriptStamp(row.sha256, size)
        return row

    async def delete_script(self, tenant: str, kind: str, name: str) -> bool:
        """Delete durably, then forget; whether it existed."""
        existed = await self.storage.delete_script(tenant, kind, name)
        self._scripts.get(tenant, {}).pop((kind, name), None)
        return existed

    async def _region_source(self, tenant: str, name: str) -> str | None:
        row = await self.storage.get_script(tenant, "region_hook", name)
        return None if row is None else row.content

    # -- providers -------------------------------------------------------------------------------

    async def _load_tables(self, tenant_only: str | None = None) -> None:
        """Tenants' own provider tables from the database, or one tenant's (sealed again under the
        first key when the key file holds several); one that cannot be opened is set aside."""
        for tenant, name, sealed in await asyncio.to_thread(self.storage.provider_tables, tenant_only):
            try:
                resealed = self.sealer.reseal(sealed)
                if resealed is not None:
                    await self.storage.put_provider_table(tenant, name, resealed)
                    sealed = resealed
                raw = self.sealer.open(sealed)
                table = parse_provider_table(
                    name, raw, base_dir=self.config.database.parent, tenant_owned=True
                )
            except (SecretsUnavailable, ProviderConfigError, ValueError) as exc:
                log.warning("provider table %s/%s set aside: %s", tenant, name, exc)
                continue
            self._tables.setdefault(tenant, {})[name] = table
            self._table_bytes.setdefault(tenant, {})[name] = _json_bytes(raw)

    def _forget_tables(self, tenant: str) -> None:
        self._tables.pop(tenant, None)
        self._table_bytes.pop(tenant, None)

    def provider_table_use(self, tenant: str) -> tuple[int, int]:
        """How many provider tables of its own the tenant has, and their bytes as JSON."""
        sizes = self._table_bytes.get(tenant, {})
        return len(sizes), sum(sizes.values())

    def _tables_of(self, tenant: str) -> tuple[tuple[str, ProviderTable], ...]:
        """The operator's tables granted to the tenant, then its own (granted names cannot be its own)."""
        granted = self.config.grants.get(tenant, ())
        operator = self.config.providers
        rows = [(name, t) for name in granted if (t := operator.table(name)) is not None]
        rows += sorted(self._tables.get(tenant, {}).items())
        return tuple(rows)

    def _provider_config(self, tenant: str) -> Any:
        return replace(
            self.config.providers,
            providers=self._tables_of(tenant),
            tenants=True,
            source=None,
            call_timeout_secs=self.limits(tenant).provider_call_secs,
            operator_egress=self.config.egress,
        )

    def provider_config(self, tenant: str, name: str) -> dict[str, Any] | None:
        """The tenant's own table of that name with its secrets hidden, or None."""
        table = self._tables.get(tenant, {}).get(name)
        return None if table is None else redacted_table(table)

    async def put_provider_config(self, tenant: str, name: str, raw: dict[str, Any]) -> dict[str, Any]:
        """Set the tenant's own provider table (sealed at rest); its redacted copy."""
        if name in self.config.grants.get(tenant, ()):
            raise RouteError(
                409,
                f"provider '{name}' is granted to this tenant by the operator: its table is not the tenant's",
            )
        try:
            table = parse_provider_table(name, raw, base_dir=self.config.database.parent, tenant_owned=True)
        except ProviderConfigError as exc:
            raise RouteError(400, str(exc)) from None
        limits, sizes = self.limits(tenant), self._table_bytes.get(tenant, {})
        if name not in sizes and len(sizes) >= limits.max_provider_tables:
            raise LimitReached(
                "max_provider_tables", f"the tenant already has {limits.max_provider_tables} provider tables"
            )
        size = _json_bytes(raw)
        total = sum(sizes.values()) - sizes.get(name, 0) + size
        if total > limits.max_provider_table_bytes:
            raise LimitReached(
                "max_provider_table_bytes",
                f"the tenant's provider tables would take {total} bytes, over its "
                f"{limits.max_provider_table_bytes}",
                status=413,
            )
        redacted = redacted_table(table)
        try:
            sealed = self.sealer.seal(raw, secret="********" in json.dumps(redacted))
        except SecretsUnavailable as exc:
            raise RouteError(409, str(exc)) from None
        await self.storage.put_provider_table(tenant, name, sealed)
        self._tables.setdefault(tenant, {})[name] = table
        self._table_bytes.setdefault(tenant, {})[name] = size
        self._reconfigure(tenant)
        return redacted

    async def delete_provider_config(self, tenant: str, name: str) -> bool:
        """Remove the tenant's own table; whether it had one."""
        existed = await self.storage.delete_provider_table(tenant, name)
        self._table_bytes.get(tenant, {}).pop(name, None)
        if self._tables.get(tenant, {}).pop(name, None) is not None:
            self._reconfigure(tenant)
        return existed

    def _reconfigure(self, tenant: str) -> None:
        runtime = self._runtimes.get(tenant)
        if runtime is not None:
            runtime.set_config(self._provider_config(tenant))

    async def remember_provider(self, tenant: str, loaded: Any) -> None:
        """Store what ``initialize`` returned, once per load (placeholders only: nothing secret)."""
        key = (tenant, loaded.name)
        if self._saved_loads.get(key) is loaded:
            return
        self._saved_loads[key] = loaded
        await self.storage.save_provider_state(tenant, loaded.name, loaded.state)

    def rate_limit_waits(self) -> list[tuple[str, str, str, int, float]]:
        """``(tenant, provider, cause, waits, seconds)`` of every provider with a rate limit (metrics)."""
        rows = []
        for tenant, runtime in sorted(self._runtimes.items()):
            for provider, cause, waits, seconds in runtime.rate_limit_waits():
                rows.append((tenant, provider, cause, waits, seconds))
        return rows

    def runtime(self, tenant: str) -> ProviderRuntime:
        """The tenant's provider runtime (its scripts from the database; the shared pool and egress)."""
        runtime = self._runtimes.get(tenant)
        if runtime is None:
            runtime = ProviderRuntime(
                PoolExecutor(self.pool),
                self.egress,
                self._provider_config(tenant),
                source=TenantScripts(self, tenant),
                shared=self.shared_limits,
            )
            self._runtimes[tenant] = runtime
        return runtime

    # -- streams ---------------------------------------------------------------------------------

    @asynccontextmanager
    async def stream_slot(self, tenant: str) -> AsyncIterator[None]:
        """Hold one of the tenant's ``max_streams`` while a stream is open."""
        limit = self.limits(tenant).max_streams
        held = self._streams.get(tenant, 0)
        if held >= limit:
            raise LimitReached("max_streams", f"the tenant already has {limit} streams open")
        self._streams[tenant] = held + 1
        try:
            yield
        finally:
            self._streams[tenant] -= 1


_POOL_KEYS = tuple(f.name for f in fields(TenantQuotas))
"""The pool's quotas are named as the service's limit keys: each is passed on as it is."""


def _pool_quotas(limits: TenantLimits) -> TenantQuotas:
    return TenantQuotas(**{key: getattr(limits, key) for key in _POOL_KEYS})


def _json_bytes(table: dict[str, Any]) -> int:
    """A provider table's size as its quota counts it: UTF-8 bytes of its JSON."""
    return len(json.dumps(table, sort_keys=True).encode("utf-8"))


def _egress_quotas(limits: TenantLimits) -> EgressQuota:
    return EgressQuota(max_inflight=limits.egress_max_inflight, max_bytes=limits.egress_max_bytes)
