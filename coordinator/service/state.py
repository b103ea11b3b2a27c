"""The running service: pool, egress, storage, tenants' scripts, regions and provider runtimes.

    HTTP routes ──▶ Service ──┬── Storage (SQLite: scripts, persistent regions, provider state)
                              ├── script files (a per-tenant copy of the stored scripts, rebuilt at start)
                              ├── RegionBook ──▶ open_region(pool, …, tenant=)
                              ├── ProviderRuntime per tenant ──▶ PoolExecutor(pool) + the shared Egress
                              └── Validator ──▶ pool.load (compile in a sandboxed worker)

The database is the truth; the files exist because the region and provider runtimes load scripts by path
(and providers reload on mtime), so a script PUT commits first and then replaces its file atomically.
"""

from __future__ import annotations

import inspect
import logging
import os
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from coordinator._core.pool import Pool
from coordinator.egress import Egress
from coordinator.nodes.link import NodeListener
from coordinator.providers import PoolExecutor, ProviderRuntime
from coordinator.service.auth import Tokens
from coordinator.service.config import ServeConfig, load_service_config
from coordinator.service.regions import RegionBook
from coordinator.service.storage import ScriptRow, Storage
from coordinator.service.validation import Validator

__all__ = ["SCRIPT_DIRS", "Service", "with_tenant"]

log = logging.getLogger("rhaipool.service")

SCRIPT_DIRS = {"provider": "providers", "region_hook": "region_hooks"}
_CONFIG_CHECK_SECS = 1.0
_accepts_tenant: dict[Any, bool] = {}


def with_tenant(fn: Any, tenant: str) -> dict[str, Any]:
    """``{"tenant": tenant}`` when ``fn`` takes ``tenant=``, else nothing (entry points gain it over time)."""
    key = getattr(fn, "__func__", fn)
    known = _accepts_tenant.get(key)
    if known is None:
        known = _accepts_tenant[key] = "tenant" in inspect.signature(fn).parameters
    return {"tenant": tenant} if known else {}


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
        self._runtimes: dict[str, ProviderRuntime] = {}
        self._saved_loads: dict[tuple[str, str], Any] = {}
        self._config_stamp: Any = None
        self._config_checked = 0.0
        self.files = config.database.with_name(config.database.name + ".scripts")

    # -- lifecycle ---------------------------------------------------------------------------------

    async def start(self) -> None:
        """Open the database, start the pool, rebuild the script files, restore persistent regions."""
        self.storage = Storage(self.config.database)
        self._refresh_tokens()
        self._config_stamp = self._stamp()
        options = {"workers": self.config.workers, **self.pool_options}
        if self.config.local_workers is not None:
            options["workers"] = self.config.local_workers
            options.setdefault("spares", min(1, self.config.local_workers))  # 0: no local spare either
        nodes = None if self.config.nodes is None else NodeListener.from_config(self.config.nodes)
        self.pool = await Pool(**options, nodes=nodes).__aenter__()
        self.egress = await Egress().__aenter__()
        self.validator = Validator(self.pool)
        await self._materialize()
        self.regions = RegionBook(self.pool, self.storage, self.script_dir)
        for problem in await self.regions.restore():
            log.warning("%s", problem)

    async def stop(self) -> None:
        """Stop the pool and egress; close the database."""
        await self.pool.aclose()
        await self.egress.aclose()
        self.storage.close()

    # -- configuration ---------------------------------------------------------------------------

    def _stamp(self) -> Any:
        if self.config.source is None:
            return None
        try:
            st = self.config.source.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size, st.st_ino)

    def reload_tokens(self) -> None:
        """Rebuild the token table (after the admin API changed a tenant)."""
        self._refresh_tokens()

    def _refresh_tokens(self) -> None:
        tenants = {**self.storage.tenants(), **self.config.tenants}
        self.tokens = Tokens(tenants, self.config.admin_token_sha256)

    def reload(self) -> None:
        """Re-read the config file (tenants, tokens, provider tables); the last good one stays on error."""
        if self.config.source is not None:
            self._config_stamp = self._stamp()
            new = load_service_config(self.config.source)
            self.config = replace(new, database=self.config.database)  # the database cannot move live
            for tenant, runtime in self._runtimes.items():
                runtime.set_config(self._provider_config(tenant))
        self._refresh_tokens()

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

    # -- scripts ---------------------------------------------------------------------------------

    def script_dir(self, tenant: str, kind: str = "region_hook") -> Path:
        """Where the tenant's scripts of ``kind`` are mirrored as files."""
        return self.files / tenant / SCRIPT_DIRS[kind]

    def _write_file(self, tenant: str, row: ScriptRow) -> None:
        folder = self.script_dir(tenant, row.kind)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{row.name}.rhai"
        temp = folder / f".{row.name}.rhai.tmp"
        temp.write_text(row.content, encoding="utf-8")
        now = time.time_ns()
        os.utime(temp, ns=(now, now))
        os.replace(temp, path)

    async def _materialize(self) -> None:
        shutil.rmtree(self.files, ignore_errors=True)
        for tenant, row in await self.storage.list_scripts():
            self._write_file(tenant, row)

    async def put_script(self, tenant: str, kind: str, name: str, content: str) -> ScriptRow:
        """Store durably, then mirror to the file the runtimes load."""
        row = await self.storage.put_script(tenant, kind, name, content)
        self._write_file(tenant, row)
        return row

    async def delete_script(self, tenant: str, kind: str, name: str) -> bool:
        """Delete durably, then remove the file; whether it existed."""
        existed = await self.storage.delete_script(tenant, kind, name)
        (self.script_dir(tenant, kind) / f"{name}.rhai").unlink(missing_ok=True)
        return existed

    # -- providers -------------------------------------------------------------------------------

    def _provider_config(self, tenant: str) -> Any:
        folder = self.script_dir(tenant, "provider")
        return replace(
            self.config.providers, providers_dir=folder, dir_override=folder, tenants=True, source=None
        )

    async def remember_provider(self, tenant: str, loaded: Any) -> None:
        """Store what ``initialize`` returned, once per load (the database holds the tenant's state)."""
        key = (tenant, loaded.name)
        if self._saved_loads.get(key) is loaded:
            return
        self._saved_loads[key] = loaded
        await self.storage.save_provider_state(tenant, loaded.name, loaded.state)

    def rate_limit_waits(self) -> list[tuple[str, str, str, int, float]]:
        """``(tenant, provider, cause, waits, seconds)`` of every provider with a rate limit (metrics).

        ``cause`` is ``window`` (its RPM/TPM windows were full) or ``429`` (the API answered 429). The
        limiters are the runtimes' own (``ProviderRuntime._limiters``: one per provider with a limit).
        """
        rows = []
        for tenant, runtime in sorted(self._runtimes.items()):
            limiters: dict[str, Any] = getattr(runtime, "_limiters", {})
            for provider, (_limit, window, backoff) in sorted(limiters.items()):
                rows.append((tenant, provider, "window", window.waits, window.waited_seconds))
                rows.append((tenant, provider, "429", backoff.waits, backoff.waited_seconds))
        return rows

    def runtime(self, tenant: str) -> ProviderRuntime:
        """The tenant's provider runtime (its own scripts directory; the shared pool and egress)."""
        runtime = self._runtimes.get(tenant)
        if runtime is None:
            runtime = ProviderRuntime(PoolExecutor(self.pool), self.egress, self._provider_config(tenant))
            self._runtimes[tenant] = runtime
        return runtime
