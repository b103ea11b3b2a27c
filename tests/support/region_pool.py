"""A real sandboxed pool per test module, driven from sync tests (the region and CLI tests' ``pooled``).

The pool lives on an event loop in a background thread, owned by one task for
its whole life (its task group must enter and exit in the same task); tests
hand it coroutines through ``Pooled.run``.
"""

from __future__ import annotations

import asyncio
import itertools
import threading
from collections.abc import Coroutine, Iterator
from concurrent.futures import Future
from pathlib import Path
from typing import Any, TypeVar

import pytest

from coordinator.regions import Region, RegionLoader

T = TypeVar("T")
_counter = itertools.count()


class Pooled:
    """A live pool and helpers to load region scripts into it."""

    def __init__(self, pool: Any, loop: asyncio.AbstractEventLoop, scripts: Path) -> None:
        self.pool = pool
        self.loop = loop
        self.scripts = scripts

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 90.0) -> T:
        """Run ``coro`` on the pool's loop and wait for its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def write_script(self, source: str, name: str = "brain.rhai") -> Path:
        """A fresh file for ``source`` (a fresh name, so no load is shared by accident)."""
        path = self.scripts / f"{next(_counter)}-{name}"
        path.write_text(source, encoding="utf-8")
        return path

    def region(
        self, source: str, *, name: str = "brain", budget: int = 1000, timeout: float = 10.0, **options: Any
    ) -> Region:
        """Load ``source`` through the pool (all docs/scripts/regions.md#loading checks) and return an empty
        region."""
        path = self.write_script(source)
        loader = RegionLoader(self.pool, timeout=timeout)
        return self.run(loader.region(name, str(path), budget=budget, **options))


@pytest.fixture(scope="module")
def pooled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pooled]:
    """A real ``Pool`` (sandboxed workers) shared by one test module.

    Module scope, not session: the pool's own suite asserts that no worker
    process outlives a test module of theirs, so ours must be gone by then.
    """
    from coordinator._core.pool import Pool

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="region-test-pool", daemon=True)
    thread.start()
    ready: Future[Any] = Future()
    stop = asyncio.Event()

    async def own() -> None:
        try:
            async with Pool() as pool:
                ready.set_result(pool)
                await stop.wait()
        except BaseException as exc:
            if not ready.done():
                ready.set_exception(exc)
            raise

    owner = asyncio.run_coroutine_threadsafe(own(), loop)
    pool = ready.result(120)
    try:
        yield Pooled(pool, loop, tmp_path_factory.mktemp("region-scripts"))
    finally:
        loop.call_soon_threadsafe(stop.set)
        owner.result(60)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
