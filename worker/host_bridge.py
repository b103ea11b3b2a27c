"""Brokered host functions and chunk emission: a script thread's side of HOST_CALL and CHUNK.

Each provider call owns a ``CallChannel``.  The loop thread only *feeds* it
(HOST_REPLY, HOST_CHUNK, CREDIT, cancel); the thread running the script alone
reads its inbox and keeps its state, so no locks are needed.  ``http_get``,
``http_post`` and ``env_var`` are made by the binding itself (``rhai.HostLine``,
one per call, bound to the thread while its script runs): the script thread writes
its HOST_CALL frame from Rhai values and sends it without the GIL, then waits with
the GIL released; the loop thread's native receive path (``rhai.Wire`` with the
lane, ``worker.wire``) reads the HOST_REPLY straight into the waiting thread's slot,
so a reply wakes only the thread waiting for it and no Python runs on its way.
What the lane does not read or write from Rhai values (a value the wire flattens or
refuses, a reply it does not read plainly) goes through the worker's codec
(``worker.wire.CODEC``) here, native too.
The one call the loop thread runs itself (``worker.loop``) waits through
``serve``, the loop's own receive loop, so its replies arrive without any thread
hand-off.  Outgoing messages go through the ``Outbox``, straight onto the worker's
socket (``rhai.Wire``): a script thread sends its own HOST_CALL, CHUNK and RESULT
instead of waking the loop thread to do it.

Flow control: a stream may have at most ``window`` chunks un-acknowledged; the
emitter blocks on CREDIT, and every HOST_CHUNK delivered to a script callback is
acknowledged with a CREDIT, so neither process buffers without bound.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, Final

import rhai

from proto import MAX_BODY_BYTES, MAX_CONTAINER_LEN, SIGNATURE, Command, Kind
from proto.values import MAX_PLAIN_DEPTH
from worker.engine import NATIVE, CallAborted, DeadlineReached
from worker.wire import CODEC

__all__ = ["HOST_FUNCTIONS", "WAITS", "CallChannel", "ChannelBinding", "Outbox"]

_HOST_CALL_HEADER: Final = SIGNATURE + bytes((Command.HOST_CALL,))
_HOST_REPLY, _HOST_CHUNK, _CREDIT = int(Command.HOST_REPLY), int(Command.HOST_CHUNK), int(Command.CREDIT)

_CANCEL: Final = object()
_current = threading.local()


class Outbox:
    """Where a script thread's messages go: straight onto the worker's socket (``rhai.Wire``)."""

    def __init__(self, wire: rhai.Wire) -> None:
        self.wire = wire

    def send(self, frame: bytes) -> None:
        """Send one frame (``worker.wire.CODEC`` wrote it)."""
        self.wire.send([frame])


class CallChannel:
    """The script thread's view of one call's traffic with the coordinator."""

    def __init__(
        self,
        call_id: int,
        outbox: Outbox,
        window: int,
        serve: Callable[[queue.SimpleQueue[object], float | None], object] | None = None,
    ) -> None:
        """``serve(inbox, timeout)``: on the loop thread, receive until ``inbox`` has a message."""
        self.id = call_id
        self._serve = serve
        self.token = rhai.CancelToken()
        self._outbox, self._inbox = outbox, queue.SimpleQueue[object]()
        self.line = rhai.HostLine(
            call_id,
            header=_HOST_CALL_HEADER,
            max_body=MAX_BODY_BYTES,
            max_container=MAX_CONTAINER_LEN,
            max_depth=MAX_PLAIN_DEPTH,
            wire=outbox.wire,
            fallback=self._send_host_call,
            fail=_fail,
            wait=None if serve is None else self._reply,
        )
        """The binding's side of ``http_get``, ``http_post`` and ``env_var`` (module docstring)."""
        self._credits, self._seq = window, 0
        self._replies: dict[int, tuple[bool, Any]] = {}
        self._chunks: dict[int, deque[Any]] = {}

    # -- loop thread ---------------------------------------------------------
    def feed(self, message: tuple[Any, ...]) -> None:
        """A HOST_REPLY ``(command, id, hid, ok, value)``, HOST_CHUNK ``(command, id, hid, seq, value)``
        or CREDIT ``(command, id, hid, n)`` for this call, as ``CODEC.read`` read it."""
        if message[0] == _HOST_REPLY and self.line.deliver(message[2], message[3], message[4]):
            return  # the reply a native wait is for (one the lane did not read plainly)
        self._inbox.put(message)

    def cancel(self) -> None:
        self.token.cancel()
        self.line.cancel()
        self._inbox.put(_CANCEL)

    # -- script thread -------------------------------------------------------
    def _pump(self, until: float | None = None) -> bool:
        """Wait for the next message for this call (``True``), or until ``until`` (monotonic) passes
        (``False``), but never past the call's own deadline."""
        remaining = rhai.current_call_remaining()
        timeout = None if remaining is None else max(remaining, 0.0)
        woken = False
        if until is not None:
            left = max(until - time.monotonic(), 0.0)
            if timeout is None or left < timeout:
                timeout, woken = left, True
        try:
            message = (
                self._inbox.get(timeout=timeout) if self._serve is None else self._serve(self._inbox, timeout)
            )
        except queue.Empty:
            if woken:
                return False
            raise DeadlineReached("the call's deadline passed while it waited for the coordinator") from None
        if message is _CANCEL:
            raise CallAborted("call cancelled")
        assert isinstance(message, tuple)
        command, hid = message[0], message[2]
        if command == _HOST_REPLY and 0 < hid <= self.line.host_calls:
            self._replies[hid] = (message[3], message[4])
        elif command == _HOST_CHUNK and hid in self._chunks:
            self._chunks[hid].append(message[4])
        elif command == _CREDIT and hid == 0:
            self._credits += message[3]
        return True

    def sleep(self, seconds: float) -> None:
        """Rhai's ``sleep``: a wait like any other, so cancel and the deadline end it, and a call the
        loop thread runs keeps serving the socket meanwhile (non-positive and NaN: no wait)."""
        if not seconds > 0:
            return
        until = time.monotonic() + min(seconds, 1e9)
        while self._pump(until):
            pass

    def _send_host_call(self, hid: int, name: str, args: list[Any]) -> None:
        """Send host call ``hid``'s HOST_CALL from the arguments' Python form (a stream's, and, as
        ``rhai.HostLine``'s fallback, those its writer flattens or refuses); a value without wire
        form is thrown into the script."""
        try:
            frame = CODEC.host_call(self.id, hid, name, args)
        except (ValueError, OverflowError) as exc:
            raise rhai.Throw(f"value cannot leave the sandbox: {exc}") from None
        self._outbox.send(frame)

    def _reply(self, hid: int) -> tuple[bool, Any]:
        """(``rhai.HostLine``, the loop thread's own call) serve until host call ``hid``'s reply."""
        while hid not in self._replies:
            self._pump()
        return self._replies.pop(hid)

    def host_stream(self, name: str, args: list[Any], callback: Callable[[Any], Any]) -> None:
        """Like ``host_call``, but deliver each HOST_CHUNK to ``callback`` (and CREDIT it) first."""
        hid = self.line.next_hid()
        pending = self._chunks[hid] = deque()
        try:
            self._send_host_call(hid, name, args)
            while True:
                if pending:
                    callback(pending.popleft())
                    self._outbox.send(CODEC.credit(self.id, hid, 1))
                elif hid in self._replies:
                    break
                else:
                    self._pump()
        finally:
            del self._chunks[hid]
        ok, value = self._replies.pop(hid)
        if not ok:
            raise rhai.Throw(value)

    def emit(self, value: Any) -> None:
        """The ``on_chunk`` callable of ``op=stream`` calls: one CHUNK, waiting for credit first."""
        while self._credits <= 0:
            self._pump()
        self._credits -= 1
        # A value without wire form becomes an error item in the stream, and the script goes on
        # (docs/scripts/providers.md#streamstate-request-on_chunk): ``CODEC.chunk`` writes that item.
        self._outbox.send(CODEC.chunk(self.id, self._seq, value))
        self._seq += 1


class ChannelBinding:
    """Make ``channel`` the target of host functions called on this thread (a class: it runs per call).

    Calls nest on the loop thread (a region call served while its provider call waits), so the
    previous binding is restored on exit.
    """

    __slots__ = ("_channel", "_previous", "_previous_line")

    def __init__(self, channel: CallChannel | None) -> None:
        self._channel = channel
        self._previous: CallChannel | None = None
        self._previous_line: rhai.HostLine | None = None

    def __enter__(self) -> None:
        self._previous = getattr(_current, "channel", None)
        _current.channel = self._channel
        self._previous_line = rhai.bind_line(None if self._channel is None else self._channel.line)

    def __exit__(self, *exc: object) -> None:
        _current.channel = self._previous
        rhai.bind_line(self._previous_line)


def _channel() -> CallChannel:
    channel: CallChannel | None = getattr(_current, "channel", None)
    if channel is None:
        raise rhai.Throw("provider host channel closed")
    return channel


def _fail(reason: str) -> None:
    """(``rhai.HostLine``) how a native wait ends: the call's deadline passed, or it was cancelled."""
    if reason == "deadline":
        raise DeadlineReached("the call's deadline passed while it waited for the coordinator")
    raise CallAborted("call cancelled")


def stream_request(url: Any, body: Any, headers: Any, callback: Callable[[Any], Any]) -> None:
    _channel().host_stream("stream_request", [url, body, headers], callback)


HOST_FUNCTIONS: Final[dict[Kind, dict[str, Callable[..., Any] | None]]] = {
    Kind.REGION: {},
    Kind.PROVIDER: {
        "http_get": NATIVE,
        "http_post": NATIVE,
        "stream_request": stream_request,
        "env_var": NATIVE,
    },
}
"""Worker-side implementations of ``proto.host.BROKERED_FUNCTIONS`` (a test keeps the names equal):
``NATIVE``, the binding's own (``rhai.HostLine``), or a Python function."""


def sleep(seconds: float) -> None:
    channel = getattr(_current, "channel", None)
    if channel is not None:
        channel.sleep(seconds)
    elif seconds > 0:  # never reached by provider calls (all are channelled); bounded all the same
        remaining = rhai.current_call_remaining()
        time.sleep(min(seconds, 1e9) if remaining is None else max(min(seconds, remaining), 0.0))


WAITS: Final[dict[Kind, list[tuple[str, Callable[..., Any], tuple[str, ...]]]]] = {
    Kind.REGION: [],
    Kind.PROVIDER: [("sleep", sleep, ("int",)), ("sleep", sleep, ("float",))],
}
"""Typed overrides of standard functions that wait: they wait through the call's channel."""
