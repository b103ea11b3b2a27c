"""``Deadlines``: every attempt's hard deadline on one event-loop timer.

An attempt arms its deadline when it starts and almost always disarms it microseconds later (its
answer came).  A ``call_later`` per attempt costs a ``TimerHandle``, a heap push and pop through
Python-level comparisons, and the loop's own clean-up of cancelled handles; here a deadline is one
tuple on a heap of our own, cancelled by a flag, and the loop holds one timer: for the earliest
deadline still armed.  Expiry is as exact as ``call_at``'s (the same loop clock).
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections.abc import Callable
from typing import Final, Generic, TypeVar

__all__ = ["Deadline", "Deadlines"]

log = logging.getLogger(__name__)

T = TypeVar("T")

_SLACK: Final = 64
"""Cancelled entries tolerated beyond the armed ones before the heap is rebuilt without them."""


class Deadline(Generic[T]):
    """One armed deadline; ``cancel()`` disarms it (idempotent)."""

    __slots__ = ("_owner", "subject", "when")

    def __init__(self, owner: Deadlines[T], subject: T, when: float) -> None:
        self._owner: Deadlines[T] | None = owner
        self.subject: T | None = subject
        self.when = when

    def cancel(self) -> None:
        owner, self._owner, self.subject = self._owner, None, None
        if owner is not None:
            owner.disarmed()

    @property
    def armed(self) -> bool:
        return self._owner is not None


class Deadlines(Generic[T]):
    """Deadlines of many subjects; ``expired(subject)`` runs on the loop as each one passes."""

    def __init__(self, loop: asyncio.AbstractEventLoop, expired: Callable[[T], None]) -> None:
        self._loop, self._expired = loop, expired
        self._heap: list[tuple[float, int, Deadline[T]]] = []
        self._order = itertools.count()
        self._armed = 0
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at = float("inf")

    def __len__(self) -> int:
        """Deadlines armed now."""
        return self._armed

    def arm(self, subject: T, delay: float) -> Deadline[T]:
        """``expired(subject)`` in ``delay`` seconds, unless the returned deadline is cancelled first."""
        when = self._loop.time() + delay
        deadline = Deadline(self, subject, when)
        heapq.heappush(self._heap, (when, next(self._order), deadline))
        self._armed += 1
        if when < self._timer_at:
            self._schedule(when)
        return deadline

    def disarmed(self) -> None:
        """One deadline was cancelled (``Deadline.cancel``): drop the dead weight once it dominates."""
        self._armed -= 1
        heap = self._heap
        if len(heap) > 2 * self._armed + _SLACK:
            self._heap = [entry for entry in heap if entry[2].armed]
            heapq.heapify(self._heap)

    def _schedule(self, when: float) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self._timer_at = when
        self._timer = self._loop.call_at(when, self._fire)

    def _fire(self) -> None:
        self._timer, self._timer_at = None, float("inf")
        now, heap, due = self._loop.time(), self._heap, []
        while heap and (heap[0][0] <= now or not heap[0][2].armed):
            deadline = heapq.heappop(heap)[2]
            if deadline.armed:
                due.append(deadline)
        for deadline in due:  # an earlier one's handling may cancel a later one: check again
            subject = deadline.subject
            if subject is None:
                continue
            deadline.cancel()
            try:
                self._expired(subject)
            except Exception:  # a timer callback: nothing may escape into the event loop
                log.exception("deadline handling failed")
        heap = self._heap  # a cancel above may have rebuilt it
        while heap and not heap[0][2].armed:
            heapq.heappop(heap)
        if heap and self._timer is None:
            self._schedule(heap[0][0])

    def close(self) -> None:
        """Disarm everything (the pool is closing)."""
        if self._timer is not None:
            self._timer.cancel()
        self._timer, self._timer_at = None, float("inf")
        for _, _, deadline in self._heap:
            deadline.cancel()
        self._heap.clear()
