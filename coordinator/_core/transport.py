"""The coordinator's ROUTER socket, driven by the event loop; the only place ``zmq`` errors are caught.

zmq's file descriptor is edge-triggered: it signals "something changed", not
"readable".  So the reader callback drains until ``EVENTS`` has no POLLIN, and
every send re-checks ``EVENTS`` (a send can consume the edge that announced a
pending message).  Frames are decoded here; a defect reaches the handler as a
``ProtocolError`` instance instead of a message, never as a raised exception.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

import zmq

from proto import MAX_BODY_BYTES, ProtocolError, WireMessage, decode, encode

__all__ = ["Router"]

log = logging.getLogger(__name__)

_BATCH: Final = 512
_EVENTS: Final = int(zmq.EVENTS)
_POLLIN: Final = int(zmq.POLLIN)  # plain ints: ``int & zmq.POLLIN`` goes through the enum machinery
_SEND: Final = int(zmq.NOBLOCK)
_SEND_MORE: Final = int(zmq.NOBLOCK | zmq.SNDMORE)
_RCVMORE: Final = int(zmq.RCVMORE)
_COPY_BELOW: Final = 65536
"""A smaller frame is copied into zmq's message (cheaper than tracking the buffer zero-copy)."""
Handler = Callable[[bytes, Any], None]
Relay = Callable[[bytes, list[bytes]], bool]


class Router:
    """ROUTER bound at ``endpoint``; ``handler(identity, message_or_protocol_error)`` runs on the loop."""

    def __init__(self, endpoint: str, handler: Handler) -> None:
        self.endpoint = endpoint
        self._handler = handler
        self._context = zmq.Context(io_threads=1)
        self._sock = self._context.socket(zmq.ROUTER)
        self._sock.setsockopt(zmq.ROUTER_MANDATORY, 1)
        self._sock.setsockopt(zmq.LINGER, 0)
        self._sock.setsockopt(zmq.SNDHWM, 0)
        self._sock.setsockopt(zmq.RCVHWM, 0)
        self._sock.setsockopt(zmq.MAXMSGSIZE, MAX_BODY_BYTES + 4096)
        self._sock.bind(endpoint)
        self._send_frame: Callable[..., Any] = super(zmq.Socket, self._sock).send
        """The socket's own ``send``, without the Python wrapper pyzmq puts over it (whose only work is
        for arguments we never pass): two sends per CALL."""
        self._loop: asyncio.AbstractEventLoop | None = None
        self._scheduled = False
        self._reading = False
        """Inside the reader's drain loop, which checks ``EVENTS`` again before each receive: a send
        made there (an answer placing the next queued call) need not check it too."""
        self.received = self.sent = self.undeliverable = 0
        self.relays: dict[bytes, Relay] = {}
        """Workers another machine runs: their frames go to their node's link (``coordinator.nodes``)."""

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        loop.add_reader(self._sock.FD, self._on_readable)
        self._schedule()

    def close(self) -> None:
        if self._loop is not None and not self._sock.closed:
            self._loop.remove_reader(self._sock.FD)
        self._sock.close(0)
        self._context.term()

    def send(self, identity: bytes, message: WireMessage) -> bool:
        """Send without blocking; ``False`` if the peer is gone (the caller decides what that means)."""
        return self.send_frames(identity, encode(message))

    def send_frames(self, identity: bytes, frames: list[bytes]) -> bool:
        relay = self.relays.get(identity)
        if relay is not None:
            return relay(identity, frames)
        send, last = self._send_frame, frames[-1]
        try:  # frame by frame, as send_multipart does, without its per-call Python checks
            send(identity, _SEND_MORE)
            if len(frames) > 1:
                for frame in frames[:-1]:
                    send(frame, _SEND_MORE)
            if len(last) <= _COPY_BELOW:
                send(last, _SEND)
            else:
                send(last, _SEND, copy=False)
        except zmq.ZMQError as exc:  # EHOSTUNREACH (ROUTER_MANDATORY) or EAGAIN
            self.undeliverable += 1
            log.debug("cannot deliver to %s: %s", identity.hex(), exc)
            return False
        finally:
            self._schedule_if_pending()
        self.sent += 1
        return True

    def _schedule_if_pending(self) -> None:
        if self._reading or self._scheduled or self._sock.closed:
            return
        if int(self._sock.get(_EVENTS)) & _POLLIN:
            self._schedule()

    def _schedule(self) -> None:
        if self._loop is not None and not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._on_readable)

    def _on_readable(self) -> None:
        self._scheduled, self._reading = False, True
        try:
            self._drain()
        finally:
            self._reading = False

    def _drain(self) -> None:
        sock = self._sock
        get, recv = sock.get, sock.recv
        for n in range(_BATCH):
            try:
                # EVENTS before every receive but the first: a wake-up of the socket's descriptor
                # nearly always brings a message (an empty receive's zmq.Again costs about two checks)
                if sock.closed or (n and not int(get(_EVENTS)) & _POLLIN):
                    return
                # recv_multipart's loop without its per-frame Python overhead; a ROUTER message is its
                # sender's identity and at least one more frame, so RCVMORE is asked only after that
                identity, frames = recv(_SEND), [recv(_SEND)]
                while get(_RCVMORE):
                    frames.append(recv(_SEND))
            except zmq.Again:
                return
            except zmq.ZMQError as exc:
                log.error("ROUTER receive failed: %s", exc)
                return
            self.received += 1
            self._deliver(identity, frames)
        self._schedule()  # more may be waiting: yield to the loop, then continue

    def deliver(self, identity: bytes, frames: list[bytes]) -> None:
        """Frames of a relayed worker (a node's link received them): decoded and handled as if local."""
        self.received += 1
        self._deliver(identity, frames)

    def _deliver(self, identity: bytes, frames: list[bytes]) -> None:
        message: Any
        try:
            message = decode(frames)
        except ProtocolError as exc:
            message = exc
        try:
            self._handler(identity, message)
        except Exception:  # the handler is ours; still, nothing may escape into the event loop
            log.exception("message handler failed")
