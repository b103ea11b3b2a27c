"""``Changes``: wait for a condition that plain callbacks change, without polling.

State in the pool changes in synchronous code (reader callbacks, timers, message handlers), where
an ``asyncio.Condition`` cannot be notified (its lock cannot be taken there).  The owner of the
state calls ``notify()`` after each change; a waiter re-checks its predicate on every wake-up.
There is no lost wake-up: on the event loop nothing runs between the check and the wait.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

__all__ = ["Changes"]


class Changes:
    """A broadcast "something changed" signal for predicates over loop-owned state."""

    def __init__(self) -> None:
        self._event = asyncio.Event()

    def notify(self) -> None:
        """Wake every waiter (each re-checks its own predicate)."""
        self._event.set()

    async def wait_until(self, predicate: Callable[[], bool], timeout: float | None = None) -> bool:
        """Wait until ``predicate()`` holds; ``False`` if ``timeout`` seconds passed first."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                while not predicate():
                    self._event.clear()
                    await self._event.wait()
        return predicate()
