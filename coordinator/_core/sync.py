"""``SyncPool``: a small blocking facade for scripts and the CLI.

It runs a private event loop in a background thread that owns the ``Pool`` (the
thread that spawns workers must outlive them: PDEATHSIG follows the forking
thread).  Every method submits a coroutine to that loop and waits for it.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine, Sequence
from types import TracebackType
from typing import Any, Literal, TypeVar

from coordinator._core.calls import CallResult, HostHandler
from coordinator._core.config import PoolConfig
from coordinator._core.handles import ScriptHandle
from coordinator._core.pool import Pool, PoolStatistics
from coordinator.tenancy import DEFAULT_TENANT

__all__ = ["SyncPool"]

T = TypeVar("T")


class SyncPool:
    """``with SyncPool(workers=2) as pool: pool.call(pool.load(src), "render", ctx)``."""

    def __init__(self, config: PoolConfig | None = None, **options: Any) -> None:
        self._pool = Pool(config, **options)
        self._loop = asyncio.new_event_loop()
        self._stop: asyncio.Event | None = None
        self._started = threading.Event()
        self._failure: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="rhaipool-loop", daemon=True)

    def _main(self) -> None:
        self._loop.run_until_complete(self._serve())
        self._loop.close()

    async def _serve(self) -> None:
        self._stop = asyncio.Event()
        try:
            async with self._pool:
                self._started.set()
                await self._stop.wait()
        except BaseException as exc:  # noqa: BLE001 - re-raised in the thread that called __enter__
            self._failure = exc
        finally:
            self._started.set()

    def __enter__(self) -> SyncPool:
        self._thread.start()
        self._started.wait()
        if self._failure is not None:
            self._thread.join()
            raise self._failure
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the pool (orderly: workers stopped and reaped) and stop the loop thread."""
        if self._thread.is_alive() and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
            self._thread.join()

    def _wait(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def load(
        self, source: str, *, name: str = "<script>", kind: Literal["region", "provider"] = "region",
        require: Sequence[tuple[str, int]] = (),
    ) -> ScriptHandle:  # fmt: skip
        return self._wait(self._pool.load(source, name=name, kind=kind, require=require))

    def call(
        self, handle: ScriptHandle, function: str, *args: Any, timeout: float | None = None,
        tenant: str = DEFAULT_TENANT, host: HostHandler | None = None,
    ) -> Any:  # fmt: skip
        return self._wait(self._pool.call(handle, function, *args, timeout=timeout, tenant=tenant, host=host))

    def call_detailed(
        self,
        handle: ScriptHandle,
        function: str,
        *args: Any,
        timeout: float | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> CallResult:
        return self._wait(self._pool.call_detailed(handle, function, *args, timeout=timeout, tenant=tenant))

    def statistics(self) -> PoolStatistics:
        async def snapshot() -> PoolStatistics:
            return self._pool.statistics()

        return self._wait(snapshot())

    @property
    def pool(self) -> Pool:
        """The underlying asyncio pool (use only from its own loop thread)."""
        return self._pool
