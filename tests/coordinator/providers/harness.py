"""A real pool + egress + provider runtime for one test, with a loop-error trap."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

from coordinator._core.config import PoolConfig
from coordinator._core.pool import Pool
from coordinator.bench.standin import StandinServer
from coordinator.egress import Egress, EgressLimits
from coordinator.providers.clock import Clock
from coordinator.providers.config import ProvidersConfig, parse_config
from coordinator.providers.executor import PoolExecutor
from coordinator.providers.runtime import ProviderRuntime

__all__ = ["Harness"]

T = TypeVar("T")


class Harness:
    """Writes provider scripts into a fresh directory and runs coroutines against a real pool."""

    def __init__(self, server: StandinServer, directory: Path) -> None:
        self.server = server
        self.dir = directory
        self.data: dict[str, Any] = {"providers_dir": str(directory), "model_providers": {}}

    def write(self, name: str, source: str) -> Path:
        """Write ``<dir>/<name>.rhai``."""
        path = self.dir / f"{name}.rhai"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(source)
        return path

    def table(self, name: str, **values: Any) -> None:
        """Set ``[model_providers.<name>]``; loopback is allowed unless ``egress_allow`` is given."""
        values.setdefault("egress_allow", ["127.0.0.1"])
        self.data["model_providers"][name] = values

    def config(self) -> ProvidersConfig:
        """The current configuration snapshot."""
        return parse_config(self.data)

    def run(
        self,
        body: Callable[[ProviderRuntime], Awaitable[T]],
        *,
        workers: int = 2,
        clock: Clock | None = None,
        timeout: float = 60.0,
        pool_config: PoolConfig | None = None,
        egress_limits: EgressLimits | None = None,
    ) -> T:
        """Start pool and egress, build a runtime, run ``body(runtime)``; fail on loop errors.

        ``pool_config`` replaces ``workers`` when a test needs the pool's other settings.
        """
        errors: list[dict[str, Any]] = []

        async def main() -> T:
            asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
            async with (
                asyncio.timeout(timeout),
                Pool(pool_config) if pool_config else Pool(workers=workers) as pool,
                Egress(limits=egress_limits) as egress,
            ):
                runtime = ProviderRuntime(PoolExecutor(pool), egress, self.config(), clock=clock)
                self.runtime = runtime
                return await body(runtime)

        result = asyncio.run(main())
        assert not errors, f"exceptions reached the event loop: {errors}"
        return result
