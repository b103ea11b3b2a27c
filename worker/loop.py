"""The worker's DEALER loop: READY, then CALLs until SHUTDOWN or the parent disappears.

    coordinator ROUTER ──CALL──▶ loop thread ──region call───────▶ engine (inline, one at a time)
           ▲                        │  ├──first provider call──▶ engine (inline; waits by serving)
           │                        │  └──more provider calls──▶ script threads ─┐
           │                        │                                            │ HOST_CALL, CHUNK,
           └──RESULT/ERROR/...◀─────┴──◀── rhai.Wire (socket + lock) ◀───────────┘ RESULT, sent by
                                                                                   the script thread
The loop thread receives; any thread sends, holding the wire's lock (zmq sockets
are not thread-safe).  The socket is pyzmq's, driven by the binding (``rhai.Wire``,
rhai-python/src/wire/socket.rs): the loop waits in ``poll()`` on the socket's FD
with the GIL released, never inside zmq, so a script thread's HOST_CALL or RESULT
leaves without waking it, and a HOST_REPLY a script thread waits for is handed to
it there (``rhai.Lane``, ``rhai.HostLine``) without the loop thread running any
Python.  Every frame is read and written natively (``worker.wire``): a plain region
call by ``rhai.Lane`` from CALL to RESULT, every other message by ``rhai.Codec``.
Region calls are CPU-bound and run inline, so a trivial call costs no thread
hand-off.  Provider calls wait on the coordinator (host calls, stream credit), so
one worker multiplexes many: the loop thread runs one itself and, while it waits,
keeps serving the socket (leader/follower without the hand-over: its replies need
no thread wake-up, ~0.3 ms of an idle provider call); the others run on script
threads.  The loop heartbeats and checks that its parent is alive every
``heartbeat`` seconds (at most 100 ms apart), also while an inline call waits.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import rhai
import zmq
import zmq.backend.cython._zmq as zmq_extension

from proto import MAX_BODY_BYTES, PROTOCOL_VERSION, Command, ErrorClass, Kind, Op
from worker.cache import ScriptCache
from worker.engine import Compiled, Engines, Outcome, ScriptFailure, translate
from worker.host_bridge import HOST_FUNCTIONS, WAITS, CallChannel, ChannelBinding, Outbox
from worker.resident import ResidentStore, resident_missing
from worker.wire import CODEC, Request, error_frame, failure_frame, new_lane, outcome_frame

__all__ = ["THREAD_STACK_BYTES", "WorkerLoop", "ended_frame"]

THREAD_STACK_BYTES: Final = 2 * 1024 * 1024
"""Scripts run on a stack of their own (rhai-python, sized from the budget), so a script thread's own
stack only holds the Python around the call; every concurrent call's stacks count against RLIMIT_AS."""

_PARENT_CHECK: Final = 0.1
_CALL, _CANCEL, _SHUTDOWN = int(Command.CALL), int(Command.CANCEL), int(Command.SHUTDOWN)
_FOR_CHANNEL: Final = frozenset({int(Command.HOST_REPLY), int(Command.HOST_CHUNK), int(Command.CREDIT)})


def ended_frame(ended: bytes | tuple[Any, ...]) -> bytes:
    """The frame ending a call the lane ran: its RESULT or ERROR as the lane wrote it, or the ERROR for
    its failure (``(id, exception)``) or for a resident base not held (``(id, "missing", base)``)."""
    if type(ended) is bytes:
        return ended
    if len(ended) == 3:
        call_id, _, base = ended
        return failure_frame(call_id, resident_missing(base))
    call_id, exc = ended
    assert isinstance(exc, BaseException)
    return failure_frame(call_id, translate(exc))


class WorkerLoop:
    """Everything the worker does after its sandbox is up."""

    def __init__(
        self,
        *,
        endpoint: str,
        identity: bytes,
        parent_alive: Callable[[], bool],
        sandbox: dict[str, Any],
        probe: dict[str, Any] | None,
        heartbeat: float,
        capacity: int,
        resident: ResidentStore | None = None,
    ) -> None:
        self._endpoint, self._identity, self._parent_alive = endpoint, identity, parent_alive
        self._ready = (os.getpid(), [PROTOCOL_VERSION], capacity, sandbox, probe)
        self._heartbeat = heartbeat
        self._cache = ScriptCache()
        self._resident = ResidentStore() if resident is None else resident
        self._lane = new_lane(self._resident.lists)
        """Plain region calls of cached scripts, frame to frame in native code (``worker/wire.py``)."""
        self._channels: dict[int, CallChannel] = {}
        self._pending: deque[list[bytes]] = deque()
        """Messages received for Python, in order (the wire hands them over in batches)."""
        threading.stack_size(THREAD_STACK_BYTES)
        self._threads = ThreadPoolExecutor(max_workers=capacity, thread_name_prefix="script")
        self._engines: Engines | None = None
        self._calls = 0
        self._stopping = False
        self._inline: CallChannel | None = None
        """The provider call the loop thread is running itself (at most one; the rest use threads)."""
        self._next_beat = self._next_check = time.monotonic()

    def run(self) -> int:
        """Serve until SHUTDOWN (exit 0) or until the parent is gone (exit 0 without GOODBYE)."""
        context = zmq.Context(io_threads=1)
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.ROUTING_ID, self._identity)
        sock.setsockopt(zmq.LINGER, 1000)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_BODY_BYTES + 4096)
        sock.connect(self._endpoint)
        self._wire = rhai.Wire(sock.underlying, fd=sock.FD, library=zmq_extension.__file__)
        self._outbox = Outbox(self._wire)
        try:
            self._engines = Engines(HOST_FUNCTIONS, WAITS)
            self._send(CODEC.ready(*self._ready))
            return self._serve()
        finally:
            self._wire.close()  # sends what is queued, waiting for a thread that is sending
            sock.close()
            context.term()

    def _serve(self) -> int:
        while True:
            self._tick()
            self._drain_socket()
            if self._stopping and not self._channels:  # script threads sent their RESULTs before leaving
                self._send(CODEC.goodbye("shutdown"))
                return 0
            self._poll(None)  # receives before it polls: catches an arrival whose edge our sends ate

    def _serve_until(self, inbox: queue.SimpleQueue[object], timeout: float | None) -> object:
        """The inline call's wait: serve the socket (heartbeats included) until ``inbox`` has a message.

        Raises ``queue.Empty`` after ``timeout`` seconds.  Calls arriving meanwhile are served as
        usual: provider calls on script threads, region calls nested on this thread.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            with contextlib.suppress(queue.Empty):
                return inbox.get_nowait()
            if deadline is not None and time.monotonic() >= deadline:
                raise queue.Empty
            self._tick()
            self._drain_socket()
            if inbox.empty():
                self._poll(deadline)

    def _tick(self) -> None:
        """Heartbeat and parent check, each when due."""
        now = time.monotonic()
        if now >= self._next_check:
            self._next_check = now + _PARENT_CHECK
            if not self._parent_alive():
                print("rhaipool worker: parent is gone, exiting", file=sys.stderr, flush=True)
                os._exit(0)
        if now >= self._next_beat:
            self._next_beat = now + self._heartbeat
            stats = {"calls": self._calls, "inflight": len(self._channels), "cached": len(self._cache)}
            self._send(CODEC.heartbeat(stats))

    def _poll(self, deadline: float | None) -> None:
        """Wait for input for Python, the next tick or ``deadline`` (host replies for script
        threads are handed on meanwhile)."""
        until = min(self._next_beat, self._next_check)
        if deadline is not None:
            until = min(until, deadline)
        self._pending.extend(self._wire.wait(self._lane, max(0.0, until - time.monotonic())))

    def _send(self, frame: bytes) -> None:
        self._wire.send([frame], loop_thread=True)

    def _drain_socket(self) -> None:
        """Serve every message received for Python, in order (a call run inline here may serve
        the ones after it)."""
        pending = self._pending
        pending.extend(self._wire.drain(self._lane))
        while pending:
            frames = pending.popleft()
            if len(frames) == 1 and not self._stopping:
                ended = self._lane.run(frames[0])  # the hot path: a plain region call, run natively
                if ended is not None:
                    self._calls += 1
                    self._send(ended_frame(ended))
                    continue
            try:
                message = CODEC.read(frames)
            except (ValueError, OverflowError) as exc:
                print(f"rhaipool worker: dropped invalid message: {exc}", file=sys.stderr, flush=True)
                continue
            self._dispatch(message)

    def _dispatch(self, message: tuple[Any, ...]) -> None:
        """Act on one message ``CODEC.read`` read: ``(command, field, ...)``."""
        command = message[0]
        if command == _CALL:
            self._calls += 1
            self._on_call(Request._make(message[1:]))
        elif command in _FOR_CHANNEL:
            channel = self._channels.get(message[1])
            if channel is not None:
                channel.feed(message)
        elif command == _CANCEL:
            channel = self._channels.get(message[1])
            if channel is not None:
                channel.cancel()
        elif command == _SHUTDOWN:
            self._stopping = True
            for channel in list(self._channels.values()):
                channel.cancel()
        # HEARTBEAT from the coordinator needs no action: receiving anything is liveness.

    def _on_call(self, call: Request) -> None:
        if self._stopping:
            self._send(error_frame(call.id, ErrorClass.CANCELLED, "worker is shutting down", "Cancelled"))
            return
        compiled = self._script_for(call)
        if compiled is None:
            return
        if call.op is Op.LOAD:
            self._send(
                CODEC.result(call.id, {"functions": [list(f) for f in compiled.functions]}, 0.0, 0.0, 0, [])
            )
        elif call.kind is Kind.REGION and call.op is Op.CALL:
            self._send(outcome_frame(call.id, self._execute(call, compiled, None)))
        elif self._inline is None:  # the loop thread is free: no thread hand-off on any of its messages
            channel = self._inline = CallChannel(call.id, self._outbox, call.window, self._serve_until)
            self._channels[call.id] = channel
            try:
                self._run_channelled(call, compiled, channel)
            finally:
                self._inline = None
        else:
            channel = CallChannel(call.id, self._outbox, call.window)
            self._channels[call.id] = channel
            self._lane.open_line(channel.line)  # its replies go to its thread from the lane
            self._threads.submit(self._run_channelled, call, compiled, channel)

    def _script_for(self, call: Request) -> Compiled | None:
        assert self._engines is not None
        compiled = self._cache.get(call.kind, call.sha)
        if compiled is not None:
            return compiled
        if call.source is None:
            self._send(
                error_frame(call.id, ErrorClass.SCRIPT_MISSING, f"script {call.sha[:12]} is not cached here")
            )
            return None
        if hashlib.sha256(call.source.encode("utf-8", "surrogatepass")).hexdigest() != call.sha:
            self._send(error_frame(call.id, ErrorClass.INTERNAL, "source does not match its sha256"))
            return None
        try:
            compiled = self._engines.compile(call.kind, call.source, call.name)
        except ScriptFailure as failure:
            self._send(failure_frame(call.id, failure))
            return None
        for sha in self._lane.take_used():  # the lane's calls count as uses in the cache's LRU order
            self._cache.get(Kind.REGION, sha)
        for kind, sha in self._cache.put(call.kind, call.sha, compiled):
            if kind == Kind.REGION:
                self._lane.discard(sha)
        if call.kind is Kind.REGION:
            self._lane.put(call.sha, compiled.script)
        return compiled

    def _execute(
        self, call: Request, compiled: Compiled, channel: CallChannel | None
    ) -> Outcome | ScriptFailure:
        assert self._engines is not None
        args = call.args
        if call.op is Op.STREAM and channel is not None:
            args = [*args, channel.emit]
        try:
            if call.resident is not None:  # region entries kept here between calls (worker/resident.py)
                args = self._resident.args_for(call.tenant, call.resident, args)
            if channel is None:  # a region call: its engine has no host function that reads the binding
                outcome = self._engines.run(compiled, call.fn, args, call.timeout, None)
            else:
                with ChannelBinding(channel):
                    outcome = self._engines.run(compiled, call.fn, args, call.timeout, channel.token)
        except ScriptFailure as failure:
            return failure
        return outcome

    def _run_channelled(self, call: Request, compiled: Compiled, channel: CallChannel) -> None:
        """Run one provider call (inline or on a script thread); every path ends in one RESULT or ERROR."""
        try:
            self._wire.send([outcome_frame(call.id, self._execute(call, compiled, channel))])
        except BaseException as exc:  # noqa: BLE001 - the call must end in an ERROR, or its caller waits forever
            self._wire.send([error_frame(call.id, ErrorClass.INTERNAL, f"{type(exc).__name__}: {exc}")])
        finally:
            self._channels.pop(call.id, None)
            self._lane.close_line(call.id)
