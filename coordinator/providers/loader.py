"""Loading provider scripts and keeping them fresh (SPEC §3.1, §3.4).

Nothing is loaded until a name is looked up. Each lookup stats the file: a cached provider is reused
only while its mtime and its configuration are unchanged; otherwise it is recompiled and
re-initialised. A failed load is never cached, so the next lookup tries again, and concurrent
lookups of the same version share one load instead of compiling it many times.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from coordinator import errors as pool_errors
from coordinator.egress import Egress, EgressPolicy, EnvResolver
from coordinator.providers.config import ProvidersConfig, ProviderTable, refreshed, resolve_script
from coordinator.providers.errors import ProviderError, ProviderLoadError, ProviderNotFound
from coordinator.providers.executor import DEFAULT_TENANT, PoolExecutor
from coordinator.providers.host import ProviderHost
from coordinator.providers.metadata import Metadata, parse_metadata

__all__ = [
    "MAX_CACHED",
    "OPTIONAL",
    "LoadedProvider",
    "ProviderLoadError",
    "ProviderLoader",
    "ProviderNotFound",
    "check_functions",
]

log = logging.getLogger(__name__)

#: Optional entry points, recognised by name *and* arity (a wrong arity means absent).
OPTIONAL = {"stream": 3, "count_tokens": 3, "list_models": 1, "warm_models": 2}
_REQUIRED = (("initialize", 1, "config", "parameter"), ("inference", 2, "state, request", "parameters"))


@dataclass(eq=False)
class LoadedProvider:
    """One loaded version of a provider for one tenant: compiled handle, metadata, state, policy.

    Each tenant loads its own copy, so its compile and ``initialize`` are its calls (scheduling,
    quotas, strikes), and a tenant's later calls run as that tenant by default.
    """

    name: str
    path: Path
    mtime_ns: int
    config_key: Any
    metadata: Metadata
    handle: Any
    state: Any
    functions: frozenset[tuple[str, int]]
    table: ProviderTable | None
    policy: EgressPolicy
    env: EnvResolver
    loaded_at: float = field(default=0.0)
    tenant: str = DEFAULT_TENANT

    def has(self, fn: str) -> bool:
        """Whether an optional entry point exists with its required arity."""
        return (fn, OPTIONAL[fn]) in self.functions


def compile_position(exc: BaseException, message: str) -> str:
    """`` (line L, position C)`` as Rhai appends it to a compile error, unless the message has it already."""
    line, column = getattr(exc, "line", None), getattr(exc, "column", None)
    return f" (line {line}, position {column})" if line and f"(line {line}" not in message else ""


def check_functions(name: str, functions: list[tuple[str, int]]) -> str | None:
    """The first missing or mis-declared required function (SPEC §3.4).

    Rhai overloads by arity, so a definition with the required arity anywhere in the script satisfies
    the check (as the reference's ``has_fn``); only when none has it is the first definition's arity
    reported.
    """
    first: dict[str, int] = {}
    for fn, arity in functions:
        first.setdefault(fn, arity)
    present = set(functions)
    for fn, arity, params, noun in _REQUIRED:
        if (fn, arity) in present:
            continue
        if fn not in first:
            return f"{name}: script must define fn {fn}({params})"
        return f"{name}: fn {fn} must take {arity} {noun} ({params}), found {first[fn]}"
    return None


def build_policy(name: str, config: ProvidersConfig, table: ProviderTable | None, state: Any) -> EgressPolicy:
    """Allowed hosts: both ``base_url``s (config, initialize's state), ``allowed_hosts``, ``egress_allow``."""
    state_url = state.get("base_url") if isinstance(state, dict) else None
    return EgressPolicy.build(
        name,
        urls=(table.base_url if table else None, state_url if isinstance(state_url, str) else None),
        allowed_hosts=table.allowed_hosts if table else (),
        egress_allow=table.egress_allow if table else (),
        max_response_bytes=(table.max_response_bytes if table else None) or config.max_response_bytes,
    )


def build_env(name: str, config: ProvidersConfig, table: ProviderTable | None) -> EnvResolver:
    """``env_var`` view: the table's values and allow-list (plus the global one unless tenants)."""
    own = table.allow_env_vars if table else ()
    return EnvResolver.build(
        name,
        configured=table.env if table else (),
        allow=own if config.tenants else own + config.allow_env_vars,
        tenant_mode=config.tenants,
    )


#: Loaded providers kept at once (one per tenant and name): the least recently used is dropped and
#: simply loaded again on its next lookup, so many tenants cannot grow the cache without bound.
MAX_CACHED = 1024


class ProviderLoader:
    """The per-(tenant, name) cache of loaded providers, bounded (``MAX_CACHED``)."""

    def __init__(
        self,
        executor: PoolExecutor,
        egress: Egress | None,
        config: ProvidersConfig,
        *,
        max_cached: int = MAX_CACHED,
    ) -> None:
        self.executor = executor
        self.egress = egress
        self.config = config
        self.max_cached = max_cached
        self._cache: OrderedDict[tuple[str, str], LoadedProvider] = OrderedDict()
        self._loading: dict[tuple[str, str, Path, int, Any], asyncio.Future[LoadedProvider]] = {}
        self._derived: tuple[ProvidersConfig, dict[str, tuple[Path, Any]]] = (config, {})

    def config_key(self, name: str) -> Any:
        """Everything in the configuration that a loaded provider depends on."""
        c = self.config
        return (c.table(name), c.allow_env_vars, c.tenants, c.max_response_bytes, c.request_timeout_secs)

    def path_of(self, name: str) -> Path:
        """The script path; ProviderNotFound when it would escape the providers directory."""
        table = self.config.table(name)
        path = resolve_script(self.config.providers_dir, name, table.script if table else None)
        if path is None:
            raise ProviderNotFound("script provider path escapes the providers directory - refusing to load")
        return path

    def _path_and_key(self, name: str) -> tuple[Path, Any]:
        """:meth:`path_of` and :meth:`config_key`, worked out once per configuration snapshot: both are
        pure functions of it, and every lookup (every inference) needs them."""
        config, derived = self._derived
        if config is not self.config:
            config, derived = self._derived = (self.config, {})
        found = derived.get(name)
        if found is None:
            found = (self.path_of(name), self.config_key(name))
            if len(derived) >= self.max_cached:  # names asked for are the callers': keep it bounded
                derived.clear()
            derived[name] = found
        return found

    def refresh_config(self) -> None:
        """Re-read the config file if it changed since the snapshot was taken (no restart needed)."""
        new = refreshed(self.config)
        if new is not None:
            self.config = new

    async def get(self, name: str, *, tenant: str = DEFAULT_TENANT) -> LoadedProvider:
        """``tenant``'s current version of ``name``, loading it if needed; raises ProviderLoadError."""
        self.refresh_config()
        path, key = self._path_and_key(name)
        slot = (tenant, name)
        try:
            mtime = os.stat(path).st_mtime_ns
        except OSError:
            self._cache.pop(slot, None)
            raise ProviderNotFound(f"no provider script {path}") from None
        cached = self._cache.get(slot)
        if cached is not None and (cached.path, cached.mtime_ns, cached.config_key) == (path, mtime, key):
            self._cache.move_to_end(slot)
            return cached
        try:
            loaded = await self._shared_load((tenant, name, path, mtime, key))
        except ProviderLoadError:
            self._cache.pop(slot, None)
            raise
        self._cache[slot] = loaded
        self._cache.move_to_end(slot)
        while len(self._cache) > self.max_cached:
            self._cache.popitem(last=False)
        return loaded

    async def _shared_load(self, flight: tuple[str, str, Path, int, Any]) -> LoadedProvider:
        """One load per flight, run in the first caller's own task (no task outlives its callers).

        Later callers wait for its outcome; if that first caller is cancelled, one of them takes over.
        """
        while (shared := self._loading.get(flight)) is not None:
            try:
                return await asyncio.shield(shared)
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not shared.cancelled() or (task is not None and task.cancelling()):
                    raise  # we were cancelled ourselves
        shared = asyncio.get_running_loop().create_future()
        self._loading[flight] = shared
        tenant, name, path, mtime, key = flight
        try:
            loaded = await self._load_logged(name, path, mtime, key, tenant)
        except asyncio.CancelledError:
            shared.cancel()
            raise
        except BaseException as exc:
            shared.set_exception(exc)
            shared.exception()  # retrieved: nobody else may be waiting for it
            raise
        else:
            shared.set_result(loaded)
            return loaded
        finally:
            self._loading.pop(flight, None)

    async def lookup(self, name: str, *, tenant: str = DEFAULT_TENANT) -> LoadedProvider | None:
        """Like :meth:`get`, but a missing or broken provider is just absent (with a warning)."""
        try:
            return await self.get(name, tenant=tenant)
        except ProviderLoadError:
            return None

    async def _load_logged(self, name: str, path: Path, mtime: int, key: Any, tenant: str) -> LoadedProvider:
        """:meth:`_load`, warning once per failed load whichever entry point asked (inference too)."""
        try:
            return await self._load(name, path, mtime, key, tenant)
        except ProviderLoadError as exc:
            log.warning(
                "script provider load failed: %s (tenant %s): %s",
                name,
                tenant,
                exc,
                extra={"provider": name, "tenant": tenant},
            )
            raise

    async def _load(self, name: str, path: Path, mtime: int, key: Any, tenant: str) -> LoadedProvider:
        """Read, parse metadata, compile, check entry points, run ``initialize`` offline."""
        try:
            source = await asyncio.to_thread(path.read_text, encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ProviderLoadError(f"read provider script {path}: {exc}") from exc
        metadata = parse_metadata(source)
        try:
            handle = await self.executor.load(source, name, tenant=tenant)
        except pool_errors.LoadError as exc:
            where = compile_position(exc, exc.message)
            raise ProviderLoadError(f"compile provider script {name}: {exc.message}{where}") from exc
        functions = list(handle.functions)
        problem = check_functions(name, functions)
        if problem is not None:
            raise ProviderLoadError(problem)
        table = self.config.table(name)
        env = build_env(name, self.config, table)
        offline = ProviderHost(
            None, build_policy(name, self.config, table, None), env, offline=True, tenant=tenant
        )
        config = table.init_config() if table else {}
        try:
            state = await self.executor.call(
                handle,
                "initialize",
                [config],
                host=offline,
                timeout=self.config.request_timeout_secs,
                tenant=tenant,
            )
        except ProviderError as exc:
            raise ProviderLoadError(exc.message) from exc
        return LoadedProvider(
            name,
            path,
            mtime,
            key,
            metadata,
            handle,
            state,
            frozenset(functions),
            table,
            build_policy(name, self.config, table, state),
            env,
            asyncio.get_running_loop().time(),
            tenant,
        )
