"""``NodeListener``: the coordinator's end of the node link — a CurveZMQ ROUTER that nodes join.

    node DEALER ══TCP+CURVE══▶ NodeListener ──HELLO/SPAWNED/EXITED/BEAT/DRAIN──▶ Supervisor.adopt/exited/drain
          ▲                          │  └──[worker id, RHP frame]──▶ Router.deliver ──▶ the pool's inbox
          └────[worker id, RHP frame]┘◀── Router.relays[worker id] ◀── the dispatcher's sends

A node's workers become the pool's workers: the supervisor holds a process record for each (its
``process`` a :class:`RemoteWorker`), the dispatcher places calls on them as on local ones, and
every RHP frame is decoded and checked here exactly as a local worker's.  Liveness: both sides send
a BEAT every ``heartbeat`` seconds; a node silent for ``liveness`` seconds is expired — each of its
workers is reported dead (``KillReason.UNREACHABLE``, no call blamed), so the dispatcher re-runs
what the delivery rules allow.  A session is one connection's routing id; frames from an expired or
unknown session get RESET, and the node starts over with fresh workers.

Keys: a session is bound to the key its connection authenticated with (the ZAP handler's User-Id),
and that key must stay authorized. The listener asks the same :class:`AuthorizedKeys` as the handshakes
at every HELLO and, for each joined node, every half heartbeat: a node whose key was revoked or deleted
is RESET and expired like a silent one (its calls settle by the delivery rules), within one heartbeat.
Its old connection is useless from then on: every frame on it gets RESET and its HELLO is refused; a
node that follows the protocol reconnects, and that handshake is refused.

Past 400 lines: the coordinator's side of the node protocol (handshake, key checks, heartbeats,
expiry) is one state machine whose handlers share its tables.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any, Final, cast

import zmq
import zmq.asyncio

from coordinator._core.config import PoolConfig
from coordinator._core.hostcalls import Spawn
from coordinator._core.kills import KillReason
from coordinator._core.processes import worker_args
from coordinator._core.supervisor import Supervisor
from coordinator._core.transport import Router
from coordinator.nodes import wire
from coordinator.nodes.auth import AuthorizedKeys, curve_authenticator, curve_server
from coordinator.nodes.config import NodesConfig
from coordinator.nodes.records import (
    DEFAULT_NODE_HEARTBEAT,
    DEFAULT_NODE_LIVENESS,
    LinkSettings,
    NodeInfo,
    NodeRecord,
    RemoteWorker,
)
from proto import MAX_BODY_BYTES, SUPPORTED_VERSIONS, ProtocolError
from proto.nodes import (
    Bye,
    Drain,
    Hello,
    KillWorker,
    NodeBeat,
    NodeMessage,
    Reset,
    Spawned,
    Welcome,
    WorkerExited,
    decode_node,
    encode_node,
)

__all__ = [
    "DEFAULT_NODE_HEARTBEAT",
    "DEFAULT_NODE_LIVENESS",
    "LinkSettings",
    "NodeInfo",
    "NodeListener",
    "RemoteWorker",
]

log = logging.getLogger("coordinator.nodes")

_CHECK: Final = 0.1
_EXPIRED_REMEMBERED: Final = 1024
_KEY_REFUSED: Final = "node key not authorized"
"""What a node whose key is refused is told (the coordinator's log says which key and why)."""


class NodeListener:
    """Lets nodes join a pool: pass it as ``Pool(config, nodes=NodeListener(...))``."""

    def __init__(
        self, listen: str, secret_key: Path, authorized_keys: Path, settings: LinkSettings | None = None
    ) -> None:
        self.listen, self._secret_key = listen, secret_key
        self._gate = AuthorizedKeys(authorized_keys)
        self._keys_checked = 0.0
        self.settings = settings or LinkSettings()
        self.endpoint = ""
        """The bound endpoint (``tcp://127.0.0.1:*`` gives the port chosen)."""
        self._nodes: dict[bytes, NodeRecord] = {}
        self._owner: dict[bytes, NodeRecord] = {}
        self._expired: dict[bytes, str] = {}
        self.worker_nodes: dict[str, str] = {}
        """Every worker id ever adopted → the name of the node that ran it."""
        self.joined = self.expired = self.refused_frames = 0
        self.refused_keys = self.dropped_keys = 0
        """HELLOs refused, and joined nodes dropped, because their key is no longer authorized."""
        self._stack = contextlib.ExitStack()
        self._sock: zmq.Socket[bytes] | None = None
        self._ticker: asyncio.Task[None] | None = None
        self._scheduled = False

    @classmethod
    def from_config(cls, config: NodesConfig) -> NodeListener:
        settings = LinkSettings(heartbeat=config.heartbeat, liveness=config.liveness)
        return cls(config.listen, config.secret_key, config.authorized_keys, settings)

    # -- Fleet ---------------------------------------------------------------
    async def start(self, router: Router, supervisor: Supervisor, config: PoolConfig, spawn: Spawn) -> None:
        """Bind and serve; ``spawn`` runs the link's ticker in the pool's TaskGroup."""
        self._router, self._supervisor = router, supervisor
        self._worker_args = worker_args(config)
        self._loop = asyncio.get_running_loop()
        context = zmq.asyncio.Context()
        self._stack.callback(context.term)
        authenticator = self._stack.enter_context(curve_authenticator(context, self._gate))
        asock = context.socket(zmq.ROUTER)
        self._stack.callback(asock.close, 0)
        curve_server(cast("zmq.Socket[bytes]", asock), self._secret_key, authenticator)
        for option, value in (
            (zmq.ROUTER_MANDATORY, 1),
            (zmq.ROUTER_HANDOVER, 1),
            (zmq.LINGER, 0),
            (zmq.SNDHWM, 0),
            (zmq.RCVHWM, 0),
            (zmq.MAXMSGSIZE, MAX_BODY_BYTES + 4096),
        ):
            asock.setsockopt(option, value)
        asock.bind(self.listen)
        self.endpoint = str(asock.getsockopt_string(zmq.LAST_ENDPOINT))
        self._sock = zmq.Socket.shadow(asock.underlying)
        self._loop.add_reader(self._sock.FD, self._on_readable)
        self._stack.callback(self._loop.remove_reader, self._sock.FD)
        self._ticker = spawn(self._tick_forever())
        self._loop.call_soon(self._on_readable)
        log.info("nodes may join at %s", self.endpoint)

    async def aclose(self) -> None:
        if self._ticker is not None:
            self._ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._ticker
            self._ticker = None
        for node in list(self._nodes.values()):
            self._send(node, Reset("the coordinator is closing"))
            self._expire(node, "left: the coordinator closed")
        self._stack.close()
        self._sock = None

    # -- introspection -------------------------------------------------------
    def nodes(self) -> list[NodeInfo]:
        return [
            NodeInfo(n.name, n.capacity, len(n.workers), n.draining, n.relayed, n.group)
            for n in self._nodes.values()
        ]

    # -- sending -------------------------------------------------------------
    def _send(self, node: NodeRecord, message: NodeMessage) -> bool:
        node.last_sent = time.monotonic()
        return self._send_frames([node.session, encode_node(message)])

    def _send_frames(self, frames: list[bytes]) -> bool:
        """Send, then look for input: zmq's FD is edge-triggered and a send can consume the edge."""
        if self._sock is None:
            return False
        sent = wire.send(self._sock, frames)
        if not self._scheduled and wire.pending(self._sock):
            self._scheduled = True
            self._loop.call_soon(self._on_readable)
        return sent

    def _reset(self, session: bytes, why: str) -> None:
        self._send_frames([session, encode_node(Reset(why))])

    def _relay(self, identity: bytes, frames: list[bytes]) -> bool:
        """``Router.relays`` hook: an RHP frame for a node's worker."""
        node = self._owner.get(identity)
        if node is None:
            return False
        return self._send_frames([node.session, identity, *frames])

    def kill(self, identity: bytes) -> None:
        """Ask the node to SIGKILL a worker; unconfirmed within one heartbeat, it is dead to the pool anyway.

        A local kill is noticed within milliseconds (pidfd); a node that is silent or slow must not
        stretch a call's deadline to the node's expiry, so the caller's timeout still bounds the answer.
        A late EXITED, or late frames of the worker, are then dropped: it no longer belongs to the node.
        """
        node = self._owner.get(identity)
        if node is not None:
            self._send(node, KillWorker(identity))
            self._loop.call_later(
                self.settings.heartbeat, self._guarded, self._unconfirmed_kill, node, identity
            )

    def _unconfirmed_kill(self, node: NodeRecord, identity: bytes) -> None:
        if self._owner.get(identity) is not node or node.workers.pop(identity, None) is None:
            return  # its EXITED came in time (or the node was expired meanwhile)
        self._forget(identity)
        process = self._supervisor.workers.get(identity)
        if process is not None:
            process.stderr_tail += (
                f"\nnode {node.name} did not confirm the kill within {self.settings.heartbeat:g} s".encode()
            )
            self._supervisor.exited(process, None)

    @staticmethod
    def _guarded(callback: Any, *args: Any) -> None:
        try:
            callback(*args)
        except Exception:  # a timer callback: nothing may escape into the event loop
            log.exception("node link timer failed")

    # -- receiving -----------------------------------------------------------
    def _on_readable(self) -> None:
        self._scheduled = False
        if self._sock is None:
            return
        batch = wire.receive_with_peer_keys(self._sock)
        for frames, key in batch:
            try:
                self._on_frames(frames, key)
            except Exception:  # ours; still, nothing may escape into the event loop
                log.exception("node link message handling failed")
        if (
            not self._scheduled
            and self._sock is not None
            and (len(batch) == wire.MAX_BATCH or wire.pending(self._sock))
        ):
            self._scheduled = True
            self._loop.call_soon(self._on_readable)

    def _on_frames(self, frames: list[bytes], key: bytes) -> None:
        session, rest = frames[0], frames[1:]
        node = self._nodes.get(session)
        if len(rest) == 2:
            identity = rest[0]
            if node is not None and self._owner.get(identity) is node:
                node.last_heard = time.monotonic()
                node.relayed += 1
                self._router.deliver(identity, rest[1:])
            else:
                self.refused_frames += 1
                if node is None:
                    self._reset(session, self._expired.get(session, "unknown session"))
            return
        try:
            message = decode_node(rest)
        except ProtocolError as exc:
            self.refused_frames += 1
            log.warning("node %s sent a bad node message: %s", node.name if node else session.hex(), exc)
            return
        if node is None:
            self._unknown_session(session, message, key)
        else:
            node.last_heard = time.monotonic()
            self._on_message(node, message)

    def _unknown_session(self, session: bytes, message: Any, key: bytes) -> None:
        if not isinstance(message, Hello):
            self._reset(session, self._expired.get(session, "unknown session"))
            return
        if self._gate.check(key) is not None:  # revoked since its handshake (the gate logs it)
            self.refused_keys += 1
            self._remember_expired(session, _KEY_REFUSED)
            self._reset(session, _KEY_REFUSED)
            return
        if not SUPPORTED_VERSIONS.intersection(message.versions):
            self._reset(session, "no common protocol version")
            return
        if self._supervisor.closing:
            self._reset(session, "the coordinator is closing")
            return
        node = NodeRecord(
            session, message.name, message.workers, message.pid, time.monotonic(), message.group, key
        )
        self._nodes[session] = node
        self.joined += 1
        settings = self.settings
        self._send(node, Welcome(settings.heartbeat, settings.liveness, dict(self._worker_args)))
        log.info("node %s joined with %d workers", node.name, node.capacity)

    def _on_message(self, node: NodeRecord, message: Any) -> None:
        if isinstance(message, Spawned):
            self._adopt(node, message)
        elif isinstance(message, WorkerExited):
            self._worker_exited(node, message)
        elif isinstance(message, NodeBeat):
            for identity, rss in message.rss.items():
                if identity in node.workers:
                    node.workers[identity].rss = rss
        elif isinstance(message, Drain):
            node.draining = True
            log.info("node %s drains: %s", node.name, message.reason)
            for identity in list(node.workers):
                process = self._supervisor.workers.get(identity)
                if process is not None:
                    self._supervisor.drain(process)
        elif isinstance(message, Bye):
            self._expire(node, f"left ({message.reason})")
        elif isinstance(message, Hello):  # a second HELLO: the node started over on this session
            self._expire(node, "started over")
            self._unknown_session(node.session, message, node.public_key)

    def _adopt(self, node: NodeRecord, message: Spawned) -> None:
        identity = message.worker
        if self._supervisor.closing:  # a replacement while the pool stops its workers: end the session
            self._send(node, Reset("the coordinator is closing"))
            self._expire(node, "reset: the coordinator is closing")
            return
        if identity in self._supervisor.workers or len(node.workers) >= node.capacity + node.capacity:
            self._send(node, KillWorker(identity))  # a clash or a runaway node: not ours
            return
        remote = RemoteWorker(node.name, message.pid, self.kill, identity, node.group)
        node.workers[identity] = remote
        self._owner[identity] = node
        self._router.relays[identity] = self._relay
        process = self._supervisor.adopt(identity, remote)
        self.worker_nodes[process.id] = node.name
        if node.draining:
            self._supervisor.drain(process)

    def _worker_exited(self, node: NodeRecord, message: WorkerExited) -> None:
        remote = node.workers.pop(message.worker, None)
        if remote is None:
            return
        self._forget(message.worker)
        remote.returncode = message.returncode
        process = self._supervisor.workers.get(message.worker)
        if process is not None:
            process.stderr_tail += message.stderr.encode("utf-8", "replace")
            self._supervisor.exited(process, message.returncode)

    def _forget(self, identity: bytes) -> None:
        self._owner.pop(identity, None)
        self._router.relays.pop(identity, None)

    def _expire(self, node: NodeRecord, why: str) -> None:
        """The node is gone: each of its workers is dead to the pool
        (its calls settle by the delivery rules)."""
        if self._nodes.pop(node.session, None) is None:
            return
        self.expired += 1
        self._remember_expired(node.session, f"session expired: {why}")
        log.warning("node %s %s; %d workers lost", node.name, why, len(node.workers))
        for identity in list(node.workers):
            node.workers.pop(identity)
            self._forget(identity)
            process = self._supervisor.workers.get(identity)
            if process is None:
                continue
            process.kill_reason = process.kill_reason or KillReason.UNREACHABLE
            process.stderr_tail += f"\nnode {node.name} {why}".encode()
            self._supervisor.exited(process, None)

    def _remember_expired(self, session: bytes, why: str) -> None:
        """What later frames of an ended session are answered (RESET with this reason)."""
        if len(self._expired) >= _EXPIRED_REMEMBERED:
            self._expired.clear()
        self._expired[session] = why

    # -- liveness ------------------------------------------------------------
    async def _tick_forever(self) -> None:
        while True:
            await asyncio.sleep(min(_CHECK, self.settings.heartbeat / 2))
            try:
                self._tick(time.monotonic())
            except Exception:  # never let a bookkeeping bug end the node link's heartbeat
                log.exception("node link tick failed")

    def _tick(self, now: float) -> None:
        settings = self.settings
        for node in list(self._nodes.values()):
            if now - node.last_heard > settings.liveness:
                self._expire(node, f"silent for {now - node.last_heard:.1f} s")
            elif now - node.last_sent >= settings.heartbeat:
                self._send(node, NodeBeat())
        if self._nodes and now - self._keys_checked >= settings.heartbeat / 2:
            self._keys_checked = now
            self._drop_unauthorized()

    def _drop_unauthorized(self) -> None:
        """Expire every joined node whose key was revoked or deleted since it joined."""
        keys = self._gate.current()
        for node in list(self._nodes.values()):
            why = keys.refusal(node.public_key)
            if why is None:
                continue
            log.warning("node %s: its key %s is %s", node.name, node.public_key.decode(), why)
            self.dropped_keys += 1
            self._send(node, Reset(_KEY_REFUSED))
            self._expire(node, "dropped: its key is no longer authorized")
