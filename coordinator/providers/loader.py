"""Loading provider scripts and keeping them fresh
(docs/scripts/providers.md#where-it-lives-and-how-it-is-named, docs/scripts/providers.md#the-functions).

Nothing is loaded until a name is looked up. Each lookup stats the file (or asks the
:class:`~coordinator.providers.source.ScriptSource` for the script's version): a cached provider is
reused only while its mtime (version) and its configuration are unchanged; otherwise it is recompiled
and re-initialised. A failed load is never cached, so the next lookup tries again, and concurrent
lookups of the same version share one load instead of compiling it many times.

Tenant mode (``ProvidersConfig.tenants``): the script never holds a secret. ``initialize`` gets a
placeholder for each secret value of its table, ``env_var`` one for each value it resolves, and the
provider's egress policy puts the real values back where they may go (``coordinator.egress.secrets``).
The provider reaches only the hosts its table names, never a ``base_url`` its ``initialize`` returns.
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
from coordinator.egress import Egress, EgressPolicy, EnvResolver, SecretMisuse, Secrets
from coordinator.egress.policy import host_of
from coordinator.providers.config import ProvidersConfig, ProviderTable, refreshed, resolve_script
from coordinator.providers.errors import ProviderError, ProviderLoadError, ProviderNotFound
from coordinator.providers.executor import DEFAULT_TENANT, PoolExecutor
from coordinator.providers.host import ProviderHost
from coordinator.providers.metadata import Metadata, parse_metadata
from coordinator.providers.source import ScriptSource
from coordinator.providers.wallclock import CallCap

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
    """The script file (with a script source: the script's name, as a path)."""
    mtime_ns: int
    """The file's mtime when loaded (with a script source: its version, below, decides)."""
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
    version: str | None = None
    """The script source's version of the script (its sha256); None for a file."""
    secrets: Secrets | None = field(default=None, repr=False)
    """Tenant mode: the real values behind the placeholders the script holds (never sent to it)."""

    def has(self, fn: str) -> bool:
        """Whether an optional entry point exists with its required arity."""
        return (fn, OPTIONAL[fn]) in self.functions


def compile_position(exc: BaseException, message: str) -> str:
    """`` (line L, position C)`` as Rhai appends it to a compile error, unless the message has it already."""
    line, column = getattr(exc, "line", None), getattr(exc, "column", None)
    return f" (line {line}, position {column})" if line and f"(line {line}" not in message else ""


def check_functions(name: str, functions: list[tuple[str, int]]) -> str | None:
    """The first missing or mis-declared required function (docs/scripts/providers.md#the-functions).

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


def build_policy(
    name: str,
    config: ProvidersConfig,
    table: ProviderTable | None,
    state: Any,
    secrets: Secrets | None = None,
) -> EgressPolicy:
    """Allowed hosts: the table's ``base_url`` host, ``allowed_hosts``, ``egress_allow`` and -- in
    library mode only -- the ``base_url`` initialize's state returned; the operator's rule on top."""
    state_url = state.get("base_url") if isinstance(state, dict) and not config.tenants else None
    return EgressPolicy.build(
        name,
        urls=(table.base_url if table else None, state_url if isinstance(state_url, str) else None),
        allowed_hosts=table.allowed_hosts if table else (),
        egress_allow=table.egress_allow if table else (),
        max_response_bytes=(table.max_response_bytes if table else None) or config.max_response_bytes,
        operator=config.operator_egress,
        secrets=secrets,
    )


def build_secrets(name: str, config: ProvidersConfig, table: ProviderTable | None) -> Secrets | None:
    """Tenant mode: a fresh set of placeholders for one load, sendable to the table's own hosts only."""
    if not config.tenants:
        return None
    named = [host_of(table.base_url)] if table and table.base_url else []
    named += [h for h in (table.allowed_hosts if table else ()) if h != "*"]
    return Secrets(name, frozenset(h.lower().rstrip(".").strip("[]") for h in named if h))


def build_env(
    name: str, config: ProvidersConfig, table: ProviderTable | None, secrets: Secrets | None = None
) -> EnvResolver:
    """``env_var`` view: the table's values and allow-list (plus the global one unless tenants)."""
    own = table.allow_env_vars if table else ()
    return EnvResolver.build(
        name,
        configured=table.env if table else (),
        allow=own if config.tenants else own + config.allow_env_vars,
        tenant_mode=config.tenants,
        secrets=secrets,
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
        source: ScriptSource | None = None,
    ) -> None:
        self.executor = executor
        self.egress = egress
        self.config = config
        self.max_cached = max_cached
        self.source = source
        """Scripts by name instead of files in ``providers_dir`` (the service's database), when given."""
        self._cache: OrderedDict[tuple[str, str], LoadedProvider] = OrderedDict()
        self._loading: dict[tuple[str, str, Path, Any, Any], asyncio.Future[LoadedProvider]] = {}
        self._derived: tuple[ProvidersConfig, dict[str, tuple[Path, Any]]] = (config, {})

    def config_key(self, name: str) -> Any:
        """Everything in the configuration that a loaded provider depends on (not the wall-clock cap,
        which each call reads from the current configuration)."""
        c = self.config
        return (
            c.table(name),
            c.allow_env_vars,
            c.tenants,
            c.max_response_bytes,
            c.request_timeout_secs,
            c.operator_egress,
        )

    def path_of(self, name: str) -> Path:
        """The script path; ProviderNotFound when it would escape the providers directory.

        With a script source, the script's name as a path: the table's ``script`` (without ``.rhai``)
        or the provider's name.
        """
        table = self.config.table(name)
        if self.source is not None:
            script = table.script if table and table.script else name
            return Path(script.removesuffix(".rhai"))
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
        stamp = self._stamp(path)
        if stamp is None:
            self._cache.pop(slot, None)
            raise ProviderNotFound(f"no provider script {path}")
        cached = self._cache.get(slot)
        if cached is not None and (cached.path, cached.version or cached.mtime_ns, cached.config_key) == (
            path,
            stamp,
            key,
        ):
            self._cache.move_to_end(slot)
            return cached
        try:
            loaded = await self._shared_load((tenant, name, path, stamp, key))
        except ProviderLoadError:
            self._cache.pop(slot, None)
            raise
        self._cache[slot] = loaded
        self._cache.move_to_end(slot)
        while len(self._cache) > self.max_cached:
            self._cache.popitem(last=False)
        return loaded

    def _stamp(self, path: Path) -> int | str | None:
        """What changes when the script does: its version in the source, else the file's mtime."""
        if self.source is not None:
            return self.source.version(str(path))
        try:
            return os.stat(path).st_mtime_ns
        except OSError:
            return None

    async def _shared_load(self, flight: tuple[str, str, Path, Any, Any]) -> LoadedProvider:
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

    async def _load_logged(
        self, name: str, path: Path, stamp: int | str, key: Any, tenant: str
    ) -> LoadedProvider:
        """:meth:`_load`, warning once per failed load whichever entry point asked (inference too)."""
        try:
            return await self._load(name, path, stamp, key, tenant)
        except ProviderLoadError as exc:
            log.warning(
                "script provider load failed: %s (tenant %s): %s",
                name,
                tenant,
                exc,
                extra={"provider": name, "tenant": tenant},
            )
            raise

    async def _read(self, path: Path) -> str:
        """The script's text, from the script source when there is one, else from its file."""
        if self.source is not None:
            try:
                text = await self.source.read(str(path))
            except Exception as exc:  # a source (a database) may fail in any way: the load fails, not us
                raise ProviderLoadError(f"read provider script {path}: {exc}") from exc
            if text is None:
                raise ProviderNotFound(f"no provider script {path}")
            return text
        try:
            return await asyncio.to_thread(path.read_text, encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ProviderLoadError(f"read provider script {path}: {exc}") from exc

    async def _load(self, name: str, path: Path, stamp: int | str, key: Any, tenant: str) -> LoadedProvider:
        """Read, parse metadata, compile, check entry points, run ``initialize`` offline."""
        source = await self._read(path)
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
        secrets = build_secrets(name, self.config, table)
        env = build_env(name, self.config, table, secrets)
        offline = ProviderHost(
            None, build_policy(name, self.config, table, None, secrets), env, offline=True, tenant=tenant
        )
        mask = secrets.placeholder if secrets is not None else None
        try:
            config = table.init_config(mask) if table else {}
        except SecretMisuse as exc:
            raise ProviderLoadError(f"provider {name}: {exc}") from None
        cap = CallCap.start(self.config.call_timeout_secs, "initialize")
        try:
            state = await cap.run(
                self.executor.call(
                    handle,
                    "initialize",
                    [config],
                    host=offline,
                    timeout=cap.limit(self.config.request_timeout_secs),
                    tenant=tenant,
                )
            )
        except ProviderError as exc:
            raise ProviderLoadError(exc.message) from exc
        return LoadedProvider(
            name,
            path,
            stamp if isinstance(stamp, int) else 0,
            key,
            metadata,
            handle,
            state,
            frozenset(functions),
            table,
            build_policy(name, self.config, table, state, secrets),
            env,
            asyncio.get_running_loop().time(),
            tenant,
            stamp if isinstance(stamp, str) else None,
            secrets,
        )
