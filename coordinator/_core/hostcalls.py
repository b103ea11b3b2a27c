"""The coordinator's side of brokered host calls: HOST_CALL in, the caller's handler runs, HOST_REPLY out.

Each host call's outcome is kept in the attempt's ``host_tasks`` and cancelled when its attempt
ends (result, deadline, worker death): one mechanism for every host call.  A unary call's
outcome is the future ``HostHandler.call`` returns (a coroutine handler's runs in a task of the
pool's TaskGroup): its HOST_REPLY is sent as it settles, at once when it is already settled
(``env_var``), so no task of its own waits for it.  ``stream_request`` runs as a task in the
pool's TaskGroup, its payloads
sent as HOST_CHUNK, at most ``window`` un-acknowledged (a semaphore released by
the worker's CREDIT messages), so a slow script makes the handler wait instead of
anything buffering without bound.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Awaitable, Callable, Coroutine
from typing import TYPE_CHECKING, Any, Final

from coordinator._core.errors import HostCallError
from proto import (
    BROKERED,
    STREAMING_HOST_CALLS,
    Credit,
    HostCall,
    HostChunk,
    HostReply,
    ProtocolError,
    WireMessage,
    encode,
)

if TYPE_CHECKING:
    from coordinator._core.calls import Attempt

__all__ = ["MAX_OPEN_HOST_CALLS", "HostBridge"]

log = logging.getLogger(__name__)

MAX_OPEN_HOST_CALLS: Final = 8
"""Host calls of one call open at once: a real worker opens more than one only by nesting (a host
call made from a ``stream_request`` callback), so this bounds a lying worker's fan-out of egress."""

SendFrames = Callable[[bytes, list[bytes]], bool]
Spawn = Callable[[Coroutine[Any, Any, None]], "asyncio.Task[None]"]


class HostBridge:
    """Runs host calls for attempts; nothing is sent for an attempt that has left its worker."""

    def __init__(self, send_frames: SendFrames, spawn: Spawn, window: int) -> None:
        self._send_frames, self._spawn, self._window = send_frames, spawn, window

    def receive(self, attempt: Attempt, msg: HostCall | Credit) -> str | None:
        """A HOST_CALL or host CREDIT of ``attempt``: served; or what is wrong with it (a violation)."""
        if isinstance(msg, Credit):
            self.credit(attempt, msg)
        elif msg.hid != attempt.host_seq + 1 or len(attempt.host_tasks) >= MAX_OPEN_HOST_CALLS:
            return f"HOST_CALL {msg.hid} out of order or too many open"
        else:
            attempt.host_seq = msg.hid
            self.start(attempt, msg)
        return None

    def _send(self, attempt: Attempt, message: WireMessage) -> bool:
        if attempt.wire_id not in attempt.worker.attempts:
            return False
        try:
            frames = encode(message)
        except ProtocolError as exc:
            if not isinstance(message, HostReply):
                raise
            frames = encode(HostReply(message.id, message.hid, False, f"host value cannot be sent: {exc}"))
        return self._send_frames(attempt.worker.identity, frames)

    def start(self, attempt: Attempt, msg: HostCall) -> None:
        call = attempt.call
        arities = BROKERED[call.handle.kind].get(msg.name)
        sent_arity = len(msg.args) + (1 if msg.name in STREAMING_HOST_CALLS else 0)
        if arities is None or sent_arity not in arities:
            self._send(
                attempt, HostReply(msg.id, msg.hid, False, f"function not found: {msg.name}/{sent_arity}")
            )
            return
        if call.host is None or msg.hid in attempt.host_tasks:
            self._send(attempt, HostReply(msg.id, msg.hid, False, "provider host channel closed"))
            return
        if msg.name in STREAMING_HOST_CALLS:
            attempt.host_credit[msg.hid] = asyncio.Semaphore(self._window)
            task = self._spawn(self._stream(attempt, msg))
            attempt.host_tasks[msg.hid] = task
            task.add_done_callback(lambda _: attempt.host_tasks.pop(msg.hid, None))
            return
        try:
            pending = call.host.call(msg.name, list(msg.args))
        except Exception as exc:  # noqa: BLE001 - a handler bug must reach the script as an error, not the loop
            self._send(attempt, self._failed(msg, exc))
            return
        outcome = pending if asyncio.isfuture(pending) else self._settled_by_task(pending)
        if outcome.done():
            self._answer(attempt, msg, outcome)
            return
        attempt.host_tasks[msg.hid] = outcome
        outcome.add_done_callback(functools.partial(self._answer, attempt, msg))

    def _settled_by_task(self, pending: Awaitable[Any]) -> asyncio.Future[Any]:
        """A coroutine handler's outcome as a future, awaited by a task of the pool's TaskGroup (which
        raises nothing into the group; cancelling the future cancels the task)."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        task = self._spawn(_settle(pending, future))
        future.add_done_callback(lambda done: task.cancel() if done.cancelled() else None)
        return future

    def _answer(self, attempt: Attempt, msg: HostCall, outcome: asyncio.Future[Any]) -> None:
        """The HOST_REPLY of a settled unary outcome; none for a cancelled one (its attempt ended)."""
        if attempt.host_tasks.get(msg.hid) is outcome:
            del attempt.host_tasks[msg.hid]
        if outcome.cancelled():
            return
        exc = outcome.exception()
        if exc is None:
            reply = HostReply(msg.id, msg.hid, True, outcome.result())
        elif isinstance(exc, Exception):
            reply = self._failed(msg, exc)
        else:  # KeyboardInterrupt, SystemExit: not the script's to catch; out of the loop, as from a task
            raise exc
        if not self._send(attempt, reply):
            log.debug("host reply for ended call %d dropped", msg.id)

    @staticmethod
    def _failed(msg: HostCall, exc: Exception) -> HostReply:
        """A handler's failure as the script sees it: its HostCallError value, else a dropped reply."""
        if isinstance(exc, HostCallError):
            return HostReply(msg.id, msg.hid, False, exc.value)
        log.warning("host handler %s failed: %r", msg.name, exc)
        return HostReply(
            msg.id, msg.hid, False, f"provider host dropped the reply: {type(exc).__name__}: {exc}"
        )

    def credit(self, attempt: Attempt, msg: Credit) -> None:
        semaphore = attempt.host_credit.get(msg.hid)
        if semaphore is not None:
            for _ in range(msg.n):
                semaphore.release()

    async def _stream(self, attempt: Attempt, msg: HostCall) -> None:
        host = attempt.call.host
        assert host is not None
        try:
            semaphore, seq = attempt.host_credit[msg.hid], 0
            async for payload in host.stream(msg.name, list(msg.args)):
                await semaphore.acquire()
                if not self._send(attempt, HostChunk(msg.id, msg.hid, seq, payload)):
                    return
                seq += 1
            reply = HostReply(msg.id, msg.hid, True, None)
        except Exception as exc:  # noqa: BLE001 - a handler bug must reach the script as an error, not the loop
            reply = self._failed(msg, exc)
        if not self._send(attempt, reply):
            log.debug("host reply for ended call %d dropped", msg.id)


async def _settle(pending: Awaitable[Any], future: asyncio.Future[Any]) -> None:
    """``pending``'s outcome into ``future``; nothing escapes into the group but a cancellation and
    what is not an ``Exception`` (as from the task that awaited a handler before)."""
    try:
        value = await pending
    except asyncio.CancelledError:
        future.cancel()
        raise
    except Exception as exc:  # noqa: BLE001 - the reply carries it (``HostBridge._answer``)
        if not future.done():
            future.set_exception(exc)
        return
    except BaseException:
        future.cancel()
        raise
    if not future.done():
        future.set_result(value)
