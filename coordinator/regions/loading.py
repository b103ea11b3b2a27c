"""Load-time resolution of region scripts (docs/scripts/regions.md#loading) and the pool-backed hook runner.

Every load-time problem -- a path outside the blueprint directory, an
unreadable file, a compile error, a missing ``render`` or a hook with the
wrong arity -- is a hard error with the reference's message.  Each distinct
script string is read and compiled once; regions naming it share it.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Protocol

from coordinator.errors import PoolClosed
from coordinator.regions.errors import RegionLoadError
from coordinator.regions.hooks import HookOutcome, ScriptInfo
from coordinator.regions.model import Volatility
from coordinator.regions.resident import ResidentEntries
from coordinator.regions.runtime import Admission, Region
from coordinator.tenancy import DEFAULT_TENANT
from proto.errors import RhaipoolError

__all__ = [
    "DEFAULT_HOOK_TIMEOUT",
    "PoolHookRunner",
    "RegionLoadError",
    "RegionLoader",
    "check_hook_arities",
    "describe_failure",
    "open_region",
    "resolve_script_path",
]

DEFAULT_HOOK_TIMEOUT = 5.0
"""Wall-clock seconds a region hook may run (our limit on top of the 100 000 operations)."""


class RegionPool(Protocol):
    """The part of ``coordinator._core.pool.Pool`` the region runtime uses."""

    async def load(self, source: str, /, *, name: str, kind: Literal["region"], tenant: str = ...) -> Any:
        """Compile and check in a worker as ``tenant``; returns a handle with ``sha256`` and ``functions``."""
        ...

    async def call(
        self,
        handle: Any,
        fn: str,
        /,
        *args: Any,
        timeout: float | None = ...,
        tenant: str = ...,
        resident: Any = ...,
    ) -> Any:
        """Run ``fn(*args)``; raises a ``RhaipoolError`` subclass on failure."""
        ...


def check_hook_arities(functions: Iterable[tuple[str, int]]) -> str | None:
    """The load-time validation message (docs/scripts/regions.md#loading) for a script's public functions, or
    ``None``.

    ``render`` is required; ``render``, ``on_write`` and ``on_overflow`` must take
    one parameter.  Rhai overloads by arity: when a one-parameter overload exists
    the hook call finds it, so the script is accepted.
    """
    arities: dict[str, list[int]] = {}
    for name, arity in functions:
        arities.setdefault(name, []).append(arity)
    if "render" not in arities:
        return "script must define fn render(ctx)"
    for hook in ("render", "on_write", "on_overflow"):
        found = arities.get(hook)
        if found and 1 not in found:
            return f"fn {hook} must take exactly one parameter (ctx), found {found[0]}"
    return None


def resolve_script_path(region: str, script: str, base_dir: str | os.PathLike[str] | None) -> Path:
    """``<base_dir>/<script>``, refused when it resolves outside ``base_dir`` (symlinks and ``..``)."""
    if not script.strip():
        raise RegionLoadError(f'region \'{region}\': kind = "custom" requires script = "<path>.rhai"')
    script = script.strip()
    if base_dir is None:
        return Path(script)
    base = Path(base_dir).resolve()
    target = (base / script).resolve()
    if not target.is_relative_to(base):
        raise RegionLoadError(
            f"region '{region}': custom region script '{script}' resolves outside the blueprint's "
            f"directory ({target} is not under {base})"
        )
    return target


def describe_failure(exc: BaseException) -> str:
    """One line naming a failed call's class and cause, with position when known."""
    message = str(getattr(exc, "message", "") or exc) or type(exc).__name__
    line, column = getattr(exc, "line", None), getattr(exc, "column", None)
    where = f" (line {line}, position {column})" if line and f"line {line}" not in message else ""
    detail = [str(v) for v in (getattr(exc, "limit", ""), getattr(exc, "exit_reason", "")) if v]
    label = type(exc).__name__ + (f" ({', '.join(detail)})" if detail else "")
    return f"{label}: {message}{where}"


@dataclass(frozen=True, slots=True)
class PoolHookRunner:
    """Runs a region's hooks in the sandboxed pool; every failure becomes an outcome."""

    pool: RegionPool
    handle: Any
    script: ScriptInfo
    timeout: float = DEFAULT_HOOK_TIMEOUT
    tenant: str = DEFAULT_TENANT
    resident: ResidentEntries | None = None
    """The region's entries kept in the worker between hooks; ``None`` ships them every call."""

    async def run_hook(self, hook: str, ctx: dict[str, Any]) -> HookOutcome:
        """Call ``hook(ctx)``; a throw, limit, deadline, lost worker or full queue is a failure outcome.

        Only ``PoolClosed`` propagates: using a closed pool is the host's mistake.
        """
        options: dict[str, Any] = {"timeout": self.timeout, "tenant": self.tenant}
        if self.resident is not None and "entries" in ctx:  # the worker splices them back in
            options["resident"] = self.resident.prepare(ctx["entries"])
            ctx = {**ctx, "entries": []}
        try:
            value = await self.pool.call(self.handle, hook, ctx, **options)
        except PoolClosed:
            raise  # the host closed the pool: its bug to see, not a script's failure to hide
        except RhaipoolError as exc:
            return HookOutcome.failure(describe_failure(exc))
        return HookOutcome.success(value)


@dataclass(frozen=True, slots=True)
class _Loaded:
    handle: Any
    info: ScriptInfo


class RegionLoader:
    """Loads region scripts into a pool once per script string, as the spawner does.

    ``base_dir`` is the blueprint directory: scripts are resolved against it
    and must stay inside it.  Without it, paths are used as given.  Every
    compile and hook runs as ``tenant`` (``None`` means ``DEFAULT_TENANT``).
    """

    def __init__(
        self,
        pool: RegionPool,
        *,
        base_dir: str | os.PathLike[str] | None = None,
        timeout: float = DEFAULT_HOOK_TIMEOUT,
        tenant: str | None = DEFAULT_TENANT,
        resident: bool = True,
    ) -> None:
        self._pool = pool
        self._base_dir = base_dir
        self._timeout = timeout
        self._tenant = DEFAULT_TENANT if tenant is None else tenant
        self._resident = resident
        self._table: dict[str, _Loaded] = {}

    async def load_script(self, region: str, script: str) -> ScriptInfo:
        """Resolve, read, compile and check ``script``; cached by the script string."""
        return (await self._load(region, script)).info

    async def _read(self, region: str, script: str) -> str:
        path = resolve_script_path(region, script, self._base_dir)
        try:
            return await asyncio.to_thread(path.read_text, encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise RegionLoadError(
                f"region '{region}': cannot read custom region script '{path}': {exc}"
            ) from exc

    async def _load(self, region: str, script: str, source: str | None = None) -> _Loaded:
        """``source`` given: that text is the script named ``script`` (no file is read)."""
        cached = self._table.get(script)
        if cached is not None:
            return cached
        if source is None:
            source = await self._read(region, script)
        label = script.strip()
        prefix = f"region '{region}': custom region script failed to compile: "
        try:
            handle = await self._pool.load(source, name=label, kind="region", tenant=self._tenant)
        except RhaipoolError as exc:
            if isinstance(exc, RegionLoadError):
                raise
            inner = describe_failure(exc).split(": ", 1)[-1]
            raise RegionLoadError(f"{prefix}Script compilation failed: {label}: {inner}") from exc
        functions = [(str(n), int(a)) for n, a in getattr(handle, "functions", ())]
        problem = check_hook_arities(functions)
        if problem is not None:
            raise RegionLoadError(f"{prefix}Script validation failed: {label}: {problem}")
        names = {name for name, _ in functions}
        sha = str(getattr(handle, "sha256", "") or hashlib.sha256(source.encode()).hexdigest())
        loaded = _Loaded(handle, ScriptInfo(label, sha, "on_write" in names, "on_overflow" in names))
        self._table[script] = loaded
        return loaded

    async def region(
        self,
        name: str,
        script: str,
        *,
        budget: int,
        persistent: bool = False,
        admission: Admission = "evict",
        volatility: Volatility = "rewritten",
        clock: Callable[[], float] | None = None,
        source: str | None = None,
    ) -> Region:
        """A new, empty ``Region`` whose hooks run in the pool (``source``: the script's text, given)."""
        loaded = await self._load(name, script, source)
        resident = ResidentEntries() if self._resident else None  # one key per region, never shared
        runner = PoolHookRunner(self._pool, loaded.handle, loaded.info, self._timeout, self._tenant, resident)
        extra: dict[str, Any] = {} if clock is None else {"clock": clock}
        return Region(
            name,
            runner,
            budget=budget,
            persistent=persistent,
            admission=admission,
            volatility=volatility,
            tenant=self._tenant,
            **extra,
        )


async def open_region(
    pool: RegionPool,
    name: str,
    script: str,
    *,
    budget: int,
    persistent: bool = False,
    admission: Admission = "evict",
    volatility: Volatility = "rewritten",
    base_dir: str | os.PathLike[str] | None = None,
    hook_timeout: float = DEFAULT_HOOK_TIMEOUT,
    tenant: str = DEFAULT_TENANT,
    resident: bool = True,
    source: str | None = None,
) -> Region:
    """Load ``script`` into ``pool`` and return a region backed by it (what ``Pool.region`` does).

    ``resident=False`` ships every entry on every hook call instead of keeping them in the worker.
    ``source`` is the script's text when the caller holds it (the service's database): ``script`` then
    only names it, and no file is read.
    """
    loader = RegionLoader(pool, base_dir=base_dir, timeout=hook_timeout, tenant=tenant, resident=resident)
    return await loader.region(
        name,
        script,
        budget=budget,
        persistent=persistent,
        admission=admission,
        volatility=volatility,
        source=source,
    )
