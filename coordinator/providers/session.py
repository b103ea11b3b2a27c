"""A ready-to-use provider runtime: pool + egress + configuration, for the CLI, the demo and the benchmark."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

from coordinator.egress import Egress, EgressLimits
from coordinator.providers.config import ProvidersConfig, load_config
from coordinator.providers.executor import DEFAULT_TENANT, KIND, PoolExecutor
from coordinator.providers.loader import OPTIONAL, check_functions, compile_position
from coordinator.providers.metadata import parse_metadata
from coordinator.providers.runtime import ProviderRuntime
from proto.errors import RhaipoolError

__all__ = [
    "ProviderValidation",
    "open_runtime",
    "read_config",
    "validate_provider",
]


def read_config(config: Path | None, providers_dir: Path | None = None) -> ProvidersConfig:
    """The config file (default ``~/.rhaipool/config.toml``), optionally with another providers directory.

    The directory override is remembered so that a later re-read of an edited file keeps it.
    """
    snapshot = load_config(config)
    if providers_dir is None:
        return snapshot
    return replace(snapshot, providers_dir=providers_dir, dir_override=providers_dir)


@asynccontextmanager
async def open_runtime(
    config: ProvidersConfig,
    *,
    workers: int | None = 1,
    egress_limits: EgressLimits | None = None,
    **pool_options: Any,
) -> AsyncIterator[ProviderRuntime]:
    """Start a pool and the shared HTTP client (``egress_limits``: its budgets), and yield a runtime."""
    from coordinator._core.pool import Pool

    async with Pool(workers=workers, **pool_options) as pool, Egress(limits=egress_limits) as egress:
        yield ProviderRuntime(PoolExecutor(pool), egress, config)


class ProviderValidation:
    """The ``--json`` document of ``rhaipool validate --kind provider``."""

    def __init__(
        self, valid: bool, error: str | None, functions: list[tuple[str, int]], metadata: dict[str, Any]
    ) -> None:
        self.valid, self.error, self.functions, self.metadata = valid, error, functions, metadata

    def to_json(self) -> dict[str, Any]:
        """``{"valid", "error", "functions": [{"name", "arity"}], "metadata": {...}}``."""
        return {
            "valid": self.valid,
            "error": self.error,
            "functions": [{"name": n, "arity": a} for n, a in self.functions],
            "metadata": self.metadata,
        }

    def describe(self, path: Path) -> str:
        """One or two lines for a person."""
        if not self.valid:
            return f"error: {self.error}"
        present = set(self.functions)
        counting = "defines count_tokens" if ("count_tokens", 3) in present else "no count_tokens (heuristic)"
        # by name *and* arity: a wrong-arity optional function is absent to the runtime
        # (docs/scripts/providers.md#the-functions)
        optional = [fn for fn in ("stream", "count_tokens", "list_models") if (fn, OPTIONAL[fn]) in present]
        return (
            f"ok: {path} is a valid provider script (optional: {', '.join(optional) or 'none'}; {counting})"
        )


async def validate_provider(path: Path, pool: Any, *, tenant: str = DEFAULT_TENANT) -> ProviderValidation:
    """Compile in a sandboxed worker (as ``tenant``) and check ``initialize``/``inference``;
    no ``initialize`` run."""
    name = path.stem
    try:
        source = await asyncio.to_thread(path.read_text, encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return ProviderValidation(False, f"read provider script {path}: {exc}", [], {})
    metadata = parse_metadata(source).to_dict()
    try:
        handle = await pool.load(source, name=name, kind=KIND, tenant=tenant)
    except RhaipoolError as exc:
        message = getattr(exc, "message", str(exc))
        message += compile_position(exc, message)
        return ProviderValidation(False, f"compile provider script {name}: {message}", [], metadata)
    functions = [(n, a) for n, a in handle.functions if not n.startswith("anon$")]
    problem = check_functions(name, functions)
    return ProviderValidation(problem is None, problem, functions, metadata)
