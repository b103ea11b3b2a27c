"""``timeout`` / ``timeout_at``: ``asyncio.timeout``'s behaviour, every deadline of a loop on one timer.

Each inference holds two bounds at once (its job bound, its HTTP request's timeout), armed when it
starts and disarmed a few hundred milliseconds later with the answer. ``asyncio.timeout`` arms each
with ``call_at``: a ``TimerHandle`` pushed on the loop's heap through Python-level comparisons, and
the loop's own clean-up of the cancelled handles, which at a few hundred calls in flight cost more
CPU than the bookkeeping around them. Here each loop's deadlines share one ``coordinator._core.timers.
TimerHeap`` (the pool's attempts use the same). On expiry the task is cancelled and the
``CancelledError`` turned into ``TimeoutError`` exactly as ``asyncio.Timeout`` does (``uncancel`` and
the task's earlier cancellation requests respected).
"""

from __future__ import annotations

import asyncio
import weakref
from types import TracebackType

from coordinator._core.timers import Timer, TimerHeap

__all__ = ["Timeout", "timeout", "timeout_at"]

_LOOPS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, TimerHeap[Timeout]] = weakref.WeakKeyDictionary()
"""One ``TimerHeap`` per loop; it holds no reference to its loop, so a closed loop is let go."""


def _deadlines(loop: asyncio.AbstractEventLoop) -> TimerHeap[Timeout]:
    deadlines = _LOOPS.get(loop)
    if deadlines is None:
        deadlines = _LOOPS[loop] = TimerHeap(Timeout.expire)
    return deadlines


class Timeout:
    """An async context manager that cancels its task at ``when`` (loop time) and then raises
    ``TimeoutError`` out of the block; ``None`` never expires."""

    __slots__ = ("_cancelling", "_deadline", "_expired", "_task", "when")

    def __init__(self, when: float | None) -> None:
        self.when = when
        self._expired = False
        self._task: asyncio.Task[object] | None = None
        self._deadline: Timer[Timeout] | None = None
        self._cancelling = 0

    @property
    def armed(self) -> bool:
        return self._deadline is not None and self._deadline.armed

    async def __aenter__(self) -> Timeout:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Timeout should be used inside a task")
        self._task, self._cancelling = task, task.cancelling()
        if self.when is not None:
            self._deadline = _deadlines(task.get_loop()).arm_at(self, self.when)
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
        if self._expired:
            assert self._task is not None
            if self._task.uncancel() <= self._cancelling and kind is asyncio.CancelledError:
                raise TimeoutError from exc

    def expired(self) -> bool:
        """Whether the deadline passed and cancelled the task."""
        return self._expired

    def expire(self) -> None:
        """The deadline passed (the loop's one timer): cancel the task, as ``asyncio.Timeout`` does."""
        self._expired = True
        assert self._task is not None
        self._task.cancel()


def timeout_at(when: float | None) -> Timeout:
    """Like ``asyncio.timeout_at``: ``TimeoutError`` once the loop's clock reaches ``when``."""
    return Timeout(when)


def timeout(delay: float | None) -> Timeout:
    """Like ``asyncio.timeout``: ``TimeoutError`` after ``delay`` seconds."""
    return Timeout(None if delay is None else asyncio.get_running_loop().time() + delay)
