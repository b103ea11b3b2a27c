"""The worker's DEALER loop: READY, then CALLs until SHUTDOWN or the parent disappears.

    coordinator ROUTER ──CALL──▶ loop thread ──region call──▶ engine (inline, one at a time)
           ▲                        │  └─provider call / stream──▶ script thread ─┐
           │                        │                                             │ HOST_CALL, CHUNK,
           └──RESULT/ERROR/...◀─────┴──◀── Outbox (eventfd) ◀──RESULT/ERROR───────┘ RESULT via Outbox

The loop thread owns the socket (zmq sockets are not thread-safe).  Region calls
are CPU-bound and run inline, so a trivial call costs no thread hand-off.  Calls
that wait on the coordinator (host calls, stream credit) run on their own thread
so one worker multiplexes many of them.  The loop heartbeats and checks that its
parent is alive every ``heartbeat`` seconds (at most 100 ms apart).
"""

from __future__ import annotations

import hashlib
import os
import resource
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Final

import zmq

from proto import (
    MAX_BODY_BYTES,
    PROTOCOL_VERSION,
    Call,
    Cancel,
    Credit,
    Error,
    Goodbye,
    Heartbeat,
    HostChunk,
    HostReply,
    Message,
    ProtocolError,
    Ready,
    Result,
    Shutdown,
    decode,
    encode,
)
from worker.cache import ScriptCache
from worker.engine import Compiled, Engines, ScriptFailure
from worker.host_bridge import HOST_FUNCTIONS, CallChannel, Outbox, bound_to

__all__ = ["THREAD_STACK_BYTES", "WorkerLoop"]

THREAD_STACK_BYTES: Final = 8 * 1024 * 1024
"""Script threads get the main thread's usual stack: 64 Rhai call levels need room."""

_PARENT_CHECK: Final = 0.1


def _peak_rss() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _failure(call_id: int, failure: ScriptFailure) -> Error:
    return Error(
        call_id,
        failure.cls,
        failure.message,
        failure.kind,
        failure.line,
        failure.column,
        failure.value,
        failure.limit,
    )


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
    ) -> None:
        self._endpoint, self._identity, self._parent_alive = endpoint, identity, parent_alive
        self._ready = Ready(os.getpid(), [PROTOCOL_VERSION], capacity, sandbox, probe)
        self._heartbeat = heartbeat
        self._cache = ScriptCache()
        self._channels: dict[int, CallChannel] = {}
        self._outbox = Outbox()
        threading.stack_size(THREAD_STACK_BYTES)
        self._threads = ThreadPoolExecutor(max_workers=capacity, thread_name_prefix="script")
        self._engines: Engines | None = None
        self._calls = 0
        self._stopping = False

    def run(self) -> int:
        """Serve until SHUTDOWN (exit 0) or until the parent is gone (exit 0 without GOODBYE)."""
        context = zmq.Context(io_threads=1)
        sock = context.socket(zmq.DEALER)
        sock.setsockopt(zmq.ROUTING_ID, self._identity)
        sock.setsockopt(zmq.LINGER, 1000)
        sock.setsockopt(zmq.SNDHWM, 0)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_BODY_BYTES + 4096)
        sock.connect(self._endpoint)
        self._sock = sock
        try:
            self._engines = Engines(HOST_FUNCTIONS)
            sandbox = dict(self._ready.sandbox)
            for problem in self._engines.problems:
                sandbox.setdefault("functions", {"active": False, "detail": ""})["detail"] += problem + "; "
            self._send(
                Ready(self._ready.pid, self._ready.versions, self._ready.capacity, sandbox, self._ready.probe)
            )
            return self._serve()
        finally:
            sock.close()
            context.term()

    def _serve(self) -> int:
        poller = zmq.Poller()
        poller.register(self._sock, zmq.POLLIN)
        poller.register(self._outbox.fd, zmq.POLLIN)
        next_beat = next_check = time.monotonic()
        while True:
            timeout = max(0.0, min(next_beat, next_check) - time.monotonic())
            events = dict(poller.poll(int(timeout * 1000)))
            if self._outbox.fd in events:
                for frames in self._outbox.drain():
                    self._send_frames(frames)
            if self._sock in events:
                self._drain_socket()
            now = time.monotonic()
            if now >= next_check:
                next_check = now + _PARENT_CHECK
                if not self._parent_alive():
                    print("rhaipool worker: parent is gone, exiting", file=sys.stderr, flush=True)
                    os._exit(0)
            if now >= next_beat:
                next_beat = now + self._heartbeat
                self._send(
                    Heartbeat(
                        {"calls": self._calls, "inflight": len(self._channels), "cached": len(self._cache)}
                    )
                )
            if self._stopping and not self._channels:
                for frames in self._outbox.drain():
                    self._send_frames(frames)
                self._send(Goodbye("shutdown"))
                return 0

    def _send_frames(self, frames: list[bytes]) -> None:
        try:
            self._sock.send_multipart(frames, copy=len(frames[-1]) <= 65536)
        except zmq.ZMQError as exc:
            print(f"rhaipool worker: send failed: {exc}", file=sys.stderr, flush=True)

    def _send(self, message: Message) -> None:
        self._send_frames(encode(message))

    def _drain_socket(self) -> None:
        while True:
            try:
                frames = self._sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                return
            except zmq.ZMQError as exc:
                print(f"rhaipool worker: receive failed: {exc}", file=sys.stderr, flush=True)
                return
            try:
                message = decode(frames)
            except ProtocolError as exc:
                print(f"rhaipool worker: dropped invalid message: {exc}", file=sys.stderr, flush=True)
                continue
            self._dispatch(message)

    def _dispatch(self, message: object) -> None:
        if isinstance(message, Call):
            self._calls += 1
            self._on_call(message)
        elif isinstance(message, (HostReply, HostChunk, Credit)):
            channel = self._channels.get(message.id)
            if channel is not None:
                channel.feed(message)
        elif isinstance(message, Cancel):
            channel = self._channels.get(message.id)
            if channel is not None:
                channel.cancel()
        elif isinstance(message, Shutdown):
            self._stopping = True
            for channel in list(self._channels.values()):
                channel.cancel()
        # HEARTBEAT from the coordinator needs no action: receiving anything is liveness.

    def _on_call(self, call: Call) -> None:
        if self._stopping:
            self._send(Error(call.id, "Cancelled", "worker is shutting down", "Cancelled"))
            return
        compiled = self._script_for(call)
        if compiled is None:
            return
        if call.op == "load":
            self._send(
                Result(call.id, {"functions": [list(f) for f in compiled.functions]}, peak_rss=_peak_rss())
            )
        elif call.kind == "region" and call.op == "call":
            self._send_outcome(call.id, self._execute(call, compiled, None))
        else:
            channel = CallChannel(call.id, self._outbox, call.window)
            self._channels[call.id] = channel
            self._threads.submit(self._thread_main, call, compiled, channel)

    def _script_for(self, call: Call) -> Compiled | None:
        assert self._engines is not None
        compiled = self._cache.get(call.kind, call.sha)
        if compiled is not None:
            return compiled
        if call.source is None:
            self._send(Error(call.id, "ScriptMissing", f"script {call.sha[:12]} is not cached here"))
            return None
        if hashlib.sha256(call.source.encode("utf-8", "surrogatepass")).hexdigest() != call.sha:
            self._send(Error(call.id, "Internal", "source does not match its sha256"))
            return None
        try:
            compiled = self._engines.compile(call.kind, call.source, call.name)
        except ScriptFailure as failure:
            self._send(_failure(call.id, failure))
            return None
        self._cache.put(call.kind, call.sha, compiled)
        return compiled

    def _execute(self, call: Call, compiled: Compiled, channel: CallChannel | None) -> Message:
        assert self._engines is not None
        args = list(call.args)
        if call.op == "stream" and channel is not None:
            args.append(channel.emit)
        try:
            with bound_to(channel):
                outcome = self._engines.run(
                    compiled, call.fn, args, call.timeout, channel.token if channel else None
                )
        except ScriptFailure as failure:
            return _failure(call.id, failure)
        return Result(
            call.id, outcome.value, outcome.wall, outcome.cpu, _peak_rss(), outcome.ops, outcome.output
        )

    def _send_outcome(self, call_id: int, message: Message) -> None:
        try:
            frames = encode(message)
        except ProtocolError as exc:
            frames = encode(
                Error(call_id, "InvalidValue", f"the return value cannot leave the sandbox: {exc}")
            )
        self._send_frames(frames)

    def _thread_main(self, call: Call, compiled: Compiled, channel: CallChannel) -> None:
        """Run one threaded call; every path ends in exactly one RESULT or ERROR."""
        try:
            message = self._execute(call, compiled, channel)
            try:
                self._outbox.put(message)
            except ProtocolError as exc:
                self._outbox.put(
                    Error(call.id, "InvalidValue", f"the return value cannot leave the sandbox: {exc}")
                )
        except BaseException as exc:
            self._outbox.put(Error(call.id, "Internal", f"{type(exc).__name__}: {exc}"))
        finally:
            self._channels.pop(call.id, None)
