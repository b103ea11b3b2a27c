"""A real pool + egress + provider runtime for one test, with a loop-error trap.

Starting a pool is most of a provider test's time (two worker processes), so the tests of a module that
ask for no pool settings of their own share one (:class:`SharedPool`); a test that sets ``workers`` or
``pool_config`` gets a fresh pool of its own, as before.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Final, TypeVar

from coordinator._core.config import PoolConfig
from coordinator._core.pool import Pool
from coordinator.bench.standin import StandinServer
from coordinator.egress import Egress, EgressLimits
from coordinator.providers.clock import Clock
from coordinator.providers.config import ProvidersConfig, parse_config
from coordinator.providers.executor import PoolExecutor
from coordinator.providers.runtime import ProviderRuntime

__all__ = ["Harness", "SharedPool"]

T = TypeVar("T")

SHARED_WORKERS: Final = 2
"""The shared pool's size: ``Harness.run``'s default."""
SPARE_WARM_SECS: Final = 30.0
"""How long a fresh shared pool may take to warm its spare, so every test finds the same pool."""


class SharedPool:
    """One ``Pool(workers=2)`` on an event loop in a background thread, lent to one test at a time.

    A pool is lent again only when the test that had it left it as it found it: the body ended (with
    its result or an error, not cancelled), no call queued or held by a worker, the same workers in the
    same states, no exit and nothing quarantined (checked again when it is next lent, so an exit
    between tests counts too). Otherwise, and after :attr:`LENDS` tests (so no tenant's script book
    fills up), the next test gets a fresh pool. The pool is owned by one task for its whole life (its
    task group enters and exits in the same task).
    """

    LENDS: Final = 10

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.errors: list[dict[str, Any]] = []
        self.loop.set_exception_handler(lambda _loop, ctx: self.errors.append(ctx))
        self._thread = threading.Thread(target=self.loop.run_forever, name="provider-test-pool", daemon=True)
        self._thread.start()
        self._pool: Pool | None = None
        self._stop: asyncio.Event | None = None
        self._owner: asyncio.Task[None] | None = None
        self._lent = 0
        self._left: tuple[Any, ...] | None = None

    def run(self, use: Callable[[Pool], Awaitable[T]], timeout: float) -> tuple[T, list[dict[str, Any]]]:
        """``use(pool)`` on the pool's loop; its result and what reached the loop's exception handler."""
        self.errors = []
        result = asyncio.run_coroutine_threadsafe(self._lend(use), self.loop).result(timeout + 60)
        return result, self.errors

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self._retire(), self.loop).result(60)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        self.loop.close()

    async def _lend(self, use: Callable[[Pool], Awaitable[T]]) -> T:
        if self._pool is not None and (self._lent >= self.LENDS or _state(self._pool) != self._left):
            await self._retire()
        pool = self._pool or await self._start()
        found = _state(pool)
        ended = False
        try:
            result = await use(pool)
            ended = True
            return result
        except Exception:  # a test's expected error: the pool may still be as it was
            ended = True
            raise
        finally:
            stats = pool.statistics()
            self._lent += 1
            self._left = _state(pool)
            if not (ended and stats.queued == 0 and stats.inflight == 0 and self._left == found):
                await self._retire()

    async def _start(self) -> Pool:
        ready: Future[Pool] = Future()
        self._stop = stop = asyncio.Event()

        async def own() -> None:
            try:
                async with Pool(workers=SHARED_WORKERS) as pool:
                    ready.set_result(pool)
                    await stop.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                raise

        self._owner = asyncio.create_task(own())
        self._pool = pool = await asyncio.wrap_future(ready)
        self._lent = 0
        async with asyncio.timeout(SPARE_WARM_SECS):  # ready means the workers are; the spare follows
            while any(w.state == "starting" for w in pool.workers()):
                await asyncio.sleep(0.01)
        return pool

    async def _retire(self) -> None:
        if self._owner is None or self._stop is None:
            return
        self._stop.set()
        owner, self._owner, self._pool, self._stop = self._owner, None, None, None
        await owner


def _state(pool: Pool) -> tuple[Any, ...]:
    """What a test must leave as it found it: each worker (pid, state), exits and quarantines."""
    stats = pool.statistics()
    workers = sorted((w.pid, w.state) for w in pool.workers())
    return tuple(workers), stats.exits, stats.spawned, stats.quarantined


class Harness:
    """Writes provider scripts into a fresh directory and runs coroutines against a real pool."""

    def __init__(self, server: StandinServer, directory: Path, shared: SharedPool | None = None) -> None:
        self.server = server
        self.dir = directory
        self.shared = shared
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
        workers: int | None = None,
        clock: Clock | None = None,
        timeout: float = 60.0,
        pool_config: PoolConfig | None = None,
        egress_limits: EgressLimits | None = None,
    ) -> T:
        """Start egress (and a pool), build a runtime, run ``body(runtime)``; fail on loop errors.

        With neither ``workers`` nor ``pool_config`` the body runs on the module's shared pool of
        ``SHARED_WORKERS`` workers (when the harness has one); otherwise on a fresh pool of its own.
        ``pool_config`` replaces ``workers`` when a test needs the pool's other settings.
        """

        async def use(pool: Pool) -> T:
            async with asyncio.timeout(timeout), Egress(limits=egress_limits) as egress:
                runtime = ProviderRuntime(PoolExecutor(pool), egress, self.config(), clock=clock)
                self.runtime = runtime
                return await body(runtime)

        if self.shared is not None and workers is None and pool_config is None:
            result, trapped = self.shared.run(use, timeout)
            assert not trapped, f"exceptions reached the event loop: {trapped}"
            return result
        errors: list[dict[str, Any]] = []

        async def main() -> T:
            asyncio.get_running_loop().set_exception_handler(lambda _loop, ctx: errors.append(ctx))
            async with asyncio.timeout(timeout):
                config = pool_config if pool_config else PoolConfig(workers=workers or SHARED_WORKERS)
                async with Pool(config) as pool:
                    return await use(pool)

        result = asyncio.run(main())
        assert not errors, f"exceptions reached the event loop: {errors}"
        return result
