"""``timeout`` / ``timeout_at``: ``asyncio.timeout``'s behaviour, every deadline of a loop on one timer.

Each inference holds two bounds at once (its job bound, its HTTP request's timeout), armed when it
starts and disarmed a few hundred milliseconds later with the answer. ``asyncio.timeout`` arms each
with ``call_at``: a ``TimerHandle`` pushed on the loop's heap through Python-level comparisons, and
the loop's own clean-up of the cancelled handles, which at a few hundred calls in flight cost more
CPU than the bookkeeping around them. Here a deadline is one tuple on a heap of our own (compared in
C), disarmed by a flag, and the loop holds one timer: for the earliest deadline still armed. On
expiry the task is cancelled and the ``CancelledError`` turned into ``TimeoutError`` exactly as
``asyncio.Timeout`` does (``uncancel`` and the task's earlier cancellation requests respected).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import weakref
from types import TracebackType
from typing import Final

__all__ = ["Timeout", "timeout", "timeout_at"]

_SLACK: Final = 64
"""Disarmed entries tolerated beyond the armed ones before the heap is rebuilt without them."""


class _Timers:
    """The deadlines of one event loop, on one loop timer (used only from that loop)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Timeout]] = []
        self._order = itertools.count()
        self._armed = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")

    def arm(self, timeout: Timeout, when: float) -> None:
        heapq.heappush(self._heap, (when, next(self._order), timeout))
        self._armed += 1
        if when < self._timer_at:
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = when
            self._timer = asyncio.get_running_loop().call_at(when, self._fire)

    def disarmed(self) -> None:
        self._armed -= 1
        if len(self._heap) > 2 * self._armed + _SLACK:
            self._heap = [entry for entry in self._heap if entry[2].armed]
            heapq.heapify(self._heap)

    def _fire(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        loop = asyncio.get_running_loop()
        now, heap, due = loop.time(), self._heap, []
        while heap and (heap[0][0] <= now or not heap[0][2].armed):
            timeout = heapq.heappop(heap)[2]
            if timeout.armed:
                due.append(timeout)
        for timeout in due:
            timeout.expire()
        heap = self._heap  # an expiry may have rebuilt it
        while heap and not heap[0][2].armed:
            heapq.heappop(heap)
        if heap and self._timer is None:
            self._timer_at = heap[0][0]
            self._timer = loop.call_at(self._timer_at, self._fire)


_LOOPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Timers] = weakref.WeakKeyDictionary()
"""One ``_Timers`` per loop; it holds no reference to its loop, so a closed loop is let go."""


def _timers(loop: asyncio.AbstractEventLoop) -> _Timers:
    timers = _LOOPS.get(loop)
    if timers is None:
        timers = _LOOPS[loop] = _Timers()
    return timers


class Timeout:
    """An async context manager that cancels its task at ``when`` (loop time) and then raises
    ``TimeoutError`` out of the block; ``None`` never expires."""

    __slots__ = ("_cancelling", "_expired", "_task", "_timers", "armed", "when")

    def __init__(self, when: float | None) -> None:
        self.when = when
        self.armed = False
        self._expired = False
        self._task: asyncio.Task[object] | None = None
        self._timers: _Timers | None = None
        self._cancelling = 0

    async def __aenter__(self) -> Timeout:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Timeout should be used inside a task")
        self._task, self._cancelling = task, task.cancelling()
        if self.when is not None:
            self._timers = _timers(task.get_loop())
            self.armed = True
            self._timers.arm(self, self.when)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._disarm()
        if self._expired:
            assert self._task is not None
            if self._task.uncancel() <= self._cancelling and kind is asyncio.CancelledError:
                raise TimeoutError from exc

    def expired(self) -> bool:
        """Whether the deadline passed and cancelled the task."""
        return self._expired

    def expire(self) -> None:
        """The deadline passed (the loop's timer): cancel the task, as ``asyncio.Timeout`` does."""
        self._disarm()
        self._expired = True
        assert self._task is not None
        self._task.cancel()

    def _disarm(self) -> None:
        if self.armed:
            self.armed = False
            assert self._timers is not None
            self._timers.disarmed()


def timeout_at(when: float | None) -> Timeout:
    """Like ``asyncio.timeout_at``: ``TimeoutError`` once the loop's clock reaches ``when``."""
    return Timeout(when)


def timeout(delay: float | None) -> Timeout:
    """Like ``asyncio.timeout``: ``TimeoutError`` after ``delay`` seconds."""
    return Timeout(None if delay is None else asyncio.get_running_loop().time() + delay)
