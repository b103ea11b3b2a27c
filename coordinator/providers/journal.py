"""The record of one provider call's brokered requests, so a re-run after a worker death sends nothing twice.

A provider call outlives its attempts: when its worker dies for a reason not blamed on the call (another
tenant's script crashed it), the pool re-runs the call elsewhere while ``ProviderHost.sent`` is false
(``coordinator._core.outcomes.may_rerun``). The journal is what keeps that false once requests went out:
each ``http_get``/``http_post``/``stream_request`` is recorded in order with its outcome, and a re-run's
requests are served from the record while they match it exactly (same function, same arguments):

* a request still in flight when the worker died is awaited: its egress runs in a task of its own,
  which the death of the worker (the cancellation of the host call) does not cancel; that task, and
  a stream's reader, run in the pool's TaskGroup (the ``spawn`` each ``begin_attempt`` hands over),
  end with the call (:meth:`Journal.close`) or with the pool, and never raise into the group;
* a finished one is answered from the record, errors included; a stream's events are replayed and the
  live stream, still open, is followed from where the dead attempt left it;
* past the end of the record, requests are performed (and recorded) normally;
* a request that differs from the record where a sent request stands (a non-deterministic script, e.g.
  a timestamp in the body) is **not** sent: the host call fails, and so does the call
  (:class:`RerunDiverged`), since performing it would send a request twice.

Memory: the record holds bodies only for the lifetime of the call (:meth:`Journal.close`), and at most
``limit`` characters of them (request bodies and answers; twice the provider's ``max_response_bytes``).
A request past that is performed unrecorded, and once such a request has left, the call is no longer
replayable (``unreplayable``), exactly as before the journal existed. ``env_var`` is not recorded: it
sends nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from coordinator.egress.timeouts import timeout
from coordinator.errors import HostCallError

__all__ = ["Journal", "StreamRecord", "identical"]

MarkSent = Callable[[], None]
Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]
"""Runs a task in the pool's TaskGroup (``HostHandler.begin_attempt``)."""


def identical(a: Any, b: Any) -> bool:
    """Equal and of the same types all the way down (``1``, ``1.0`` and ``true`` are different requests)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(identical(v, b[k]) for k, v in a.items())
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(map(identical, a, b))
    return bool(a == b)


def weight(value: Any) -> int:
    """Characters a recorded value keeps alive (strings; containers by their contents)."""
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, dict):
        return sum(weight(k) + weight(v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return sum(map(weight, value))
    return 8


class StreamRecord:
    """One ``stream_request``: the events read so far, read one ahead of demand by a single pump task.

    The egress stream is iterated by one task only (its timeouts and budgets belong to that task), and
    only as fast as a consumer asks, so the script's credit window still throttles the provider.
    """

    def __init__(
        self, events: AsyncIterator[Any], idle: float, on_event: Callable[[int], None], spawn: Spawn
    ) -> None:
        self.payloads: list[Any] = []
        self.error: HostCallError | None = None
        self.finished = False
        self.kept = True
        """``False`` once the journal stopped keeping it: events handed over are then dropped."""
        self._base = 0  # index of payloads[0] once events are dropped
        self._wanted = 1
        self._changed = asyncio.Condition()
        self._idle, self._on_event = idle, on_event
        self.task = spawn(self._pump(events))

    async def _pump(self, events: AsyncIterator[Any]) -> None:
        try:
            async with contextlib.aclosing(events):  # type: ignore[type-var]
                async for payload in events:
                    async with self._changed:
                        self.payloads.append(payload)
                        self._on_event(weight(payload))
                        self._changed.notify_all()
                        # a stream nobody asks anything of for a whole request timeout is closed
                        async with timeout(self._idle):
                            await self._changed.wait_for(lambda: self._wanted > self._end)
        except HostCallError as exc:
            self.error = exc
        except TimeoutError:
            self.error = HostCallError("stream abandoned: nobody read it for its request timeout")
        except asyncio.CancelledError:
            self.error = HostCallError("stream closed: its call ended")
            raise
        except Exception as exc:  # noqa: BLE001 - a handler bug reaches the script as an error, not as an end
            self.error = HostCallError(f"provider host stream failed: {type(exc).__name__}: {exc}")
        finally:
            self.finished = True
            with contextlib.suppress(RuntimeError):  # the loop is closing
                async with self._changed:
                    self._changed.notify_all()

    @property
    def _end(self) -> int:
        return self._base + len(self.payloads)

    def _has(self, index: int) -> bool:
        return self.finished or index < self._end

    async def follow(self) -> AsyncIterator[Any]:
        """Every event from the first (replayed from the record, then live), then the stream's error."""
        index = self._base
        while True:
            if index < self._base:
                raise HostCallError("stream events were not kept; it cannot be replayed")
            if index < self._end:
                payload = self.payloads[index - self._base]
                index += 1
                if not self.kept:
                    del self.payloads[: index - self._base]
                    self._base = index
                yield payload
                continue
            if self.finished:
                if self.error is not None:
                    raise self.error
                return
            async with self._changed:
                self._wanted = max(self._wanted, index + 1)
                self._changed.notify_all()
                await self._changed.wait_for(functools.partial(self._has, index))


async def _performed(
    perform: Callable[[MarkSent], Awaitable[Any]],
    mark_sent: MarkSent,
    outcome: asyncio.Future[Any],
    answer: asyncio.Future[Any],
) -> None:
    """``perform``'s outcome into ``outcome`` (the record) and ``answer`` (the attempt that asked):
    ``asyncio.shield`` of a new request, without the shield's extra future and loop turn. Cancelling
    ``answer`` abandons it and leaves the request running; a request cancelled (its call ended)
    cancels both.  Nothing else escapes: the task runs in the pool's TaskGroup."""
    try:
        value = await perform(mark_sent)
    except asyncio.CancelledError:
        outcome.cancel()
        answer.cancel()
        raise
    except BaseException as exc:  # noqa: BLE001 - recorded: a re-run is answered the same failure
        for future in (outcome, answer):
            if not future.done():
                future.set_exception(exc)
        return
    for future in (outcome, answer):
        if not future.done():
            future.set_result(value)


@dataclass(eq=False)
class Entry:
    """One recorded request: what was asked, whether it left the machine, and its outcome."""

    name: str
    args: list[Any]
    sent: bool = False
    weight: int = 0
    """Characters of it the record holds (its arguments and its answer, as far as kept)."""
    outcome: asyncio.Future[Any] | None = None
    task: asyncio.Task[None] | None = None
    """The request's own task (``_performed``), which sets ``outcome``."""
    stream: StreamRecord | None = None

    def cancel(self) -> None:
        if self.task is not None:
            self.task.cancel()
        if self.outcome is not None:
            self.outcome.cancel()
        if self.stream is not None:
            self.stream.task.cancel()


@dataclass(eq=False)
class Journal:
    """The requests of one provider call across its attempts; see the module docstring."""

    limit: int
    entries: list[Entry] = field(default_factory=list)
    cursor: int = 0
    """Position of the current attempt in ``entries``: 0 at the start of every attempt."""
    size: int = 0
    unreplayable: bool = False
    """A request left the machine without being kept in the record (past ``limit``)."""
    diverged: str | None = None
    """Why a re-run was refused a request (``RerunDiverged``)."""
    spawn: Spawn | None = None
    """Where requests and stream readers run: the pool's TaskGroup, handed over by ``begin_attempt``."""
    _unkept: list[Entry] = field(default_factory=list)

    def begin_attempt(self, spawn: Spawn) -> None:
        """A new attempt starts (the call's first, or a re-run): it is served from the beginning, and
        what it starts runs through ``spawn``."""
        self.cursor = 0
        self.spawn = spawn

    def _spawner(self) -> Spawn:
        """``spawn``, or a clear error if no attempt handed one over (checked before anything is recorded)."""
        if self.spawn is None:
            raise RuntimeError("the journal has no task group: no attempt began (begin_attempt)")
        return self.spawn

    @property
    def sent(self) -> bool:
        """A request left the machine that a re-run could not be served from the record."""
        return self.unreplayable or self.diverged is not None

    async def unary(self, name: str, args: list[Any], perform: Callable[[MarkSent], Awaitable[Any]]) -> Any:
        """``http_get``/``http_post``: the recorded outcome, or ``perform``'s, run in a task of its own."""
        return await self.unary_outcome(name, args, perform)

    def unary_outcome(
        self, name: str, args: list[Any], perform: Callable[[MarkSent], Awaitable[Any]]
    ) -> asyncio.Future[Any]:
        """:meth:`unary` without a coroutine around it: the outcome, shielded (cancelling it leaves the
        request running for a re-run). Raises at once when a re-run diverged."""
        entry = self._replayed(name, args)
        if entry is not None:
            assert entry.outcome is not None
            return asyncio.shield(entry.outcome)
        loop, spawn = asyncio.get_running_loop(), self._spawner()
        entry = self._new(name, args)
        outcome, answer = loop.create_future(), loop.create_future()
        entry.task = spawn(_performed(perform, self._sent_of(entry), outcome, answer))
        entry.outcome = outcome
        outcome.add_done_callback(lambda done: self._settled(entry, done))
        return answer

    def stream(
        self, name: str, args: list[Any], open_events: Callable[[MarkSent], AsyncIterator[Any]], idle: float
    ) -> AsyncIterator[Any]:
        """``stream_request``: the recorded events, then the live ones."""
        entry = self._replayed(name, args)
        if entry is None:
            spawn = self._spawner()
            entry = self._new(name, args)
            record = StreamRecord(
                open_events(self._sent_of(entry)), idle, lambda n: self._grow(entry, n), spawn
            )
            record.kept = entry in self.entries
            entry.stream = record
            record.task.add_done_callback(lambda _: self._forget(entry))
        assert entry.stream is not None
        return entry.stream.follow()

    def close(self) -> None:
        """The call ended: stop what is still running for it and let the record go."""
        for entry in (*self.entries, *self._unkept):
            entry.cancel()
        self.entries.clear()
        self._unkept.clear()
        self.size = 0

    # -- the record -------------------------------------------------------------------------------

    def _replayed(self, name: str, args: list[Any]) -> Entry | None:
        """The entry serving this request of a re-run; ``None`` to perform it; raises on divergence."""
        if self.diverged is not None:
            raise HostCallError(self._diverged_value())
        if self.cursor >= len(self.entries):
            return None
        entry = self.entries[self.cursor]
        if entry.name == name and identical(entry.args, args):
            self.cursor += 1
            return entry
        tail = self.entries[self.cursor :]
        if not any(old.sent for old in tail):  # nothing of the old path left the machine: forget it
            for old in tail:
                old.cancel()
            del self.entries[self.cursor :]
            self.size = sum(e.weight for e in self.entries)
            return None
        asked = f"other arguments to {name}" if name == entry.name else f"{name}, not {entry.name},"
        self.diverged = (
            f"a re-run after a worker death asked for {asked} than its first run sent as request "
            f"{self.cursor + 1}: the script is not deterministic (e.g. a timestamp in a body); nothing "
            "was sent, since the call's request would have been sent twice"
        )
        raise HostCallError(self._diverged_value())

    def _diverged_value(self) -> dict[str, Any]:
        return {"kind": "transport", "message": self.diverged, "transient": False}

    def _new(self, name: str, args: list[Any]) -> Entry:
        entry = Entry(name, args)
        if self._fits(entry, weight(args)):
            self.entries.append(entry)
            self.cursor = len(self.entries)
        else:
            self._unkept.append(entry)
        return entry

    def _fits(self, entry: Entry, n: int) -> bool:
        if self.size + n > self.limit:
            return False
        self.size += n
        entry.weight += n
        return True

    def _sent_of(self, entry: Entry) -> MarkSent:
        def mark() -> None:
            entry.sent = True
            if entry not in self.entries:
                self.unreplayable = True

        return mark

    def _drop(self, entry: Entry) -> None:
        """Too big to keep: out of the record (a re-run could not be served it)."""
        if entry in self.entries:
            at = self.entries.index(entry)
            dropped = self.entries[at:]  # the later ones are useless to a re-run without it
            del self.entries[at:]
            self.cursor = min(self.cursor, at)
            self.size = sum(e.weight for e in self.entries)
            self._unkept.extend(dropped)
            for old in dropped:
                if old.stream is not None:
                    old.stream.kept = False
                self.unreplayable = self.unreplayable or old.sent
        self.unreplayable = self.unreplayable or entry.sent

    def _grow(self, entry: Entry, n: int) -> None:
        if entry in self.entries and not self._fits(entry, n):
            self._drop(entry)

    def _settled(self, entry: Entry, done: asyncio.Future[Any]) -> None:
        if done.cancelled():
            self._forget(entry)
            return
        error = done.exception()  # retrieved here: a dead attempt may never await it
        self._grow(entry, weight(error.value if isinstance(error, HostCallError) else done.result()))
        self._forget(entry)

    def _forget(self, entry: Entry) -> None:
        """A finished entry that is not kept holds nothing any more."""
        with contextlib.suppress(ValueError):
            self._unkept.remove(entry)
