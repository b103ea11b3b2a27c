"""A host handler that answers unary host calls as futures (``start_call``, what ``ProviderHost`` does):
the pool replies from the future, and an attempt that ends abandons the future, not the work."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from pool_support import run

from coordinator._core.pool import Pool
from coordinator.errors import HostCallError, ScriptTimeout

PROVIDER = """
fn fetch(url) { http_get(url) }
fn guarded(url) { let r = ""; try { r = http_get(url); } catch (e) { r = e; } r }
fn key() { env_var("API_KEY") }
"""


class FutureHost:
    """Answers from a table; ``http://slow`` answers only when the test says so."""

    def __init__(self) -> None:
        self.sent = False
        self.started: list[asyncio.Future[Any]] = []
        self.slow: asyncio.Future[Any] | None = None
        self.answer: asyncio.Future[Any] | None = None

    def start_call(self, name: str, args: list[Any]) -> asyncio.Future[Any]:
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self.started.append(future)
        if name == "env_var":
            future.set_result("secret" if args == ["API_KEY"] else None)
        elif args[0] == "http://fail":
            future.set_exception(HostCallError({"kind": "api", "message": "HTTP 500: x"}))
        elif args[0] == "http://bug":
            future.set_exception(RuntimeError("handler bug"))
        elif args[0] == "http://slow":
            self.slow = asyncio.get_running_loop().create_future()
            self.answer = asyncio.shield(self.slow)
            return self.answer
        else:
            future.set_result(f"{name}:{args[0]}")
        return future

    async def call(self, name: str, args: list[Any]) -> Any:
        raise AssertionError("the pool must use start_call")

    def stream(self, name: str, args: list[Any]) -> AsyncIterator[Any]:
        raise AssertionError("no streams here")


def test_replies_come_from_the_futures() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            host = FutureHost()
            assert await pool.call(handle, "fetch", "http://a", host=host) == "http_get:http://a"
            assert await pool.call(handle, "key", host=host) == "secret"
            thrown = await pool.call(handle, "guarded", "http://fail", host=host)
            assert thrown == {"kind": "api", "message": "HTTP 500: x"}
            bug = await pool.call(handle, "guarded", "http://bug", host=host)
            assert bug == "provider host dropped the reply: RuntimeError: handler bug"
            assert len(host.started) == 4

    run(scenario())


def test_an_ended_attempt_abandons_its_future_but_not_the_work() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool:
            handle = await pool.load(PROVIDER, name="p.rhai", kind="provider")
            host = FutureHost()
            with pytest.raises(ScriptTimeout):
                await pool.call(handle, "fetch", "http://slow", host=host, timeout=0.5)
            assert host.answer is not None and host.answer.cancelled()  # the answer is abandoned
            assert host.slow is not None and not host.slow.cancelled()  # the work itself runs on
            host.slow.set_result("late")
            await asyncio.sleep(0.1)  # its reply, if any were sent, would reach the worker now
            assert await pool.call(handle, "fetch", "http://a", host=host) == "http_get:http://a"

    run(scenario())
