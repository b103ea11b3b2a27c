"""Shared helpers for the pool tests: run a coroutine with a loop-error trap, and check for stray children.

Imported by the conftest of tests/worker, tests/coordinator and tests/integration.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import psutil

T = TypeVar("T")

SCRIPT = """
fn add(a, b) { a + b }
fn echo(x) { x }
fn render(ctx) { ctx.x * 2 }
fn spin() { loop { } }
fn rec(n) { rec(n + 1) }
fn sleepy(s, v) { sleep(s); v }
fn fail(m) { throw #{ message: m, transient: true, kind: "api" } }
fn oops() { let x = 1; x.no_such_method() }
fn keys_bomb() {
    let m = #{}; let s = "y"; while s.len < 500000 { s += s; }
    let i = 0; loop { m[i.to_string() + s] = i; i += 1; }
}
fn talk() { print("hello"); debug("dbg"); 5 }
"""


def run(coro: Coroutine[Any, Any, T], timeout: float = 90.0) -> T:
    """``asyncio.run`` with a deadline and a trap:
    anything reaching the loop's exception handler fails the test."""
    errors: list[dict[str, Any]] = []

    async def main() -> T:
        asyncio.get_running_loop().set_exception_handler(lambda loop, ctx: errors.append(ctx))
        async with asyncio.timeout(timeout):
            return await coro

    result = asyncio.run(main())
    assert not errors, f"exceptions reached the event loop: {errors}"
    return result


def wait_no_children(timeout: float = 5.0) -> list[psutil.Process]:
    """Children of this process still alive (zombies count) after waiting up to ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        children = [c for c in psutil.Process().children(recursive=True) if _alive_or_zombie(c)]
        if not children or time.monotonic() > deadline:
            return children
        time.sleep(0.02)


def _alive_or_zombie(proc: psutil.Process) -> bool:
    try:
        proc.status()
    except psutil.NoSuchProcess:
        return False
    return True
