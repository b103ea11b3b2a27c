"""An injectable clock, so retry and rate-limit schedules are tested without real sleeps."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

__all__ = ["Clock", "ManualClock", "MonotonicClock"]


class Clock(Protocol):
    """What schedules need: the time now and a way to wait."""

    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...

    async def sleep(self, seconds: float) -> None:
        """Wait ``seconds``."""
        ...


class MonotonicClock:
    """The real clock."""

    def now(self) -> float:
        """``time.monotonic()``."""
        return time.monotonic()

    async def sleep(self, seconds: float) -> None:
        """``asyncio.sleep``."""
        await asyncio.sleep(max(0.0, seconds))


class ManualClock:
    """A clock whose ``sleep`` advances time instantly and records the requested delays."""

    def __init__(self, start: float = 1000.0) -> None:
        self.time = start
        self.sleeps: list[float] = []

    def now(self) -> float:
        """The simulated time."""
        return self.time

    async def sleep(self, seconds: float) -> None:
        """Record the delay, jump the time forward, and yield to the loop once."""
        self.sleeps.append(seconds)
        self.time += max(0.0, seconds)
        await asyncio.sleep(0)
