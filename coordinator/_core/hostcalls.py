"""The coordinator's side of brokered host calls: HOST_CALL in, the caller's handler runs, HOST_REPLY out.

Each host call runs as a task in the pool's TaskGroup (``HostHandler.call``, or ``stream``
for ``stream_request``) and is cancelled when its attempt ends (result, deadline, worker
death): one mechanism for every host call.  ``stream_request`` payloads are
sent as HOST_CHUNK, at most ``window`` un-acknowledged (a semaphore released by
the worker's CREDIT messages), so a slow script makes the handler wait instead of
anything buffering without bound.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
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
        task = self._spawn(self._serve(attempt, msg))
        attempt.host_tasks[msg.hid] = task
        task.add_done_callback(lambda _: attempt.host_tasks.pop(msg.hid, None))

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

    async def _serve(self, attempt: Attempt, msg: HostCall) -> None:
        host = attempt.call.host
        assert host is not None
        try:
            if msg.name in STREAMING_HOST_CALLS:
                semaphore, seq = attempt.host_credit[msg.hid], 0
                async for payload in host.stream(msg.name, list(msg.args)):
                    await semaphore.acquire()
                    if not self._send(attempt, HostChunk(msg.id, msg.hid, seq, payload)):
                        return
                    seq += 1
                reply = HostReply(msg.id, msg.hid, True, None)
            else:
                reply = HostReply(msg.id, msg.hid, True, await host.call(msg.name, list(msg.args)))
        except Exception as exc:  # noqa: BLE001 - a handler bug must reach the script as an error, not the loop
            reply = self._failed(msg, exc)
        if not self._send(attempt, reply):
            log.debug("host reply for ended call %d dropped", msg.id)
