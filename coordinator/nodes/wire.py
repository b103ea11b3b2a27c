"""Non-blocking sends and drained receives on the node link's sockets; where its ``zmq`` errors are caught.

Both ends of the link (the coordinator's node ROUTER and a node's DEALER and worker ROUTER) only
ever send without blocking and read until nothing is left, as ``coordinator._core.transport`` does:
a peer that is gone (``EHOSTUNREACH`` under ``ROUTER_MANDATORY``) or a full queue is a ``False``,
never an exception, and the caller decides what it means.
"""

from __future__ import annotations

import logging
from typing import Final

import zmq

__all__ = ["MAX_BATCH", "pending", "receive", "receive_with_peer_keys", "send"]

log = logging.getLogger("coordinator.nodes")

MAX_BATCH: Final = 512
_EVENTS: Final = int(zmq.EVENTS)
_POLLIN: Final = int(zmq.POLLIN)
_NOBLOCK: Final = int(zmq.NOBLOCK)
_RCVMORE: Final = int(zmq.RCVMORE)


def send(sock: zmq.Socket[bytes], frames: list[bytes]) -> bool:
    """Send ``frames`` now or not at all; ``False`` if the peer is unknown/gone or the socket is closed."""
    if sock.closed:
        return False
    try:
        sock.send_multipart(frames, _NOBLOCK)
    except zmq.ZMQError as exc:
        log.debug("cannot send on the node link: %s", exc)
        return False
    return True


def pending(sock: zmq.Socket[bytes]) -> bool:
    """Whether a message waits (zmq's FD is edge-triggered: ask ``EVENTS``)."""
    try:
        return not sock.closed and bool(int(sock.getsockopt(_EVENTS)) & _POLLIN)
    except zmq.ZMQError:
        return False


def receive(sock: zmq.Socket[bytes], limit: int = MAX_BATCH) -> list[list[bytes]]:
    """Up to ``limit`` waiting messages, each as its frames; an empty list when none waits."""
    batch: list[list[bytes]] = []
    while len(batch) < limit and pending(sock):
        try:
            batch.append(sock.recv_multipart(_NOBLOCK))
        except zmq.ZMQError as exc:  # Again after all, or the socket closed under us
            log.debug("node link receive: %s", exc)
            break
    return batch


def receive_with_peer_keys(
    sock: zmq.Socket[bytes], limit: int = MAX_BATCH
) -> list[tuple[list[bytes], bytes]]:
    """As :func:`receive`, each message with the z85 key its CURVE connection authenticated with.

    That is the ``User-Id`` the ZAP handler gave the connection (``b""`` on a socket without one):
    the coordinator binds a joining node's session to it, to drop the node if the key is revoked.
    """
    batch: list[tuple[list[bytes], bytes]] = []
    while len(batch) < limit and pending(sock):
        try:
            first = sock.recv(_NOBLOCK, copy=False)
            frames = [first.bytes]
            while sock.getsockopt(_RCVMORE):
                frames.append(sock.recv(_NOBLOCK))
        except zmq.ZMQError as exc:  # Again after all, or the socket closed under us
            log.debug("node link receive: %s", exc)
            break
        batch.append((frames, _user_id(first)))
    return batch


def _user_id(frame: zmq.Frame) -> bytes:
    try:
        return str(frame.get("User-Id")).encode("ascii", "replace")
    except zmq.ZMQError:  # no ZAP handler on this socket: no authenticated key
        return b""
