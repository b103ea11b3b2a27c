"""``rhaipool node``: a trusted process on another machine running sandboxed workers for a coordinator.

    coordinator ══TCP+CURVE══ DEALER ─┐  Node (one thread, one zmq poll)  ┌─ ROUTER ◀══ipc══ workers
                                      └── [worker id, RHP frame] relayed ─┘   (spawned here, pidfd-reaped)

A *session* is one connection: HELLO (name, worker count) → WELCOME (liveness rule, worker limits)
→ the node starts its workers (SPAWNED each) and relays their RHP frames untouched, both ways.  The
workers connect only to the node's private ipc socket: they stay network-free, and egress, rate
limits, quotas and state stay with the coordinator.  The node reports each worker's exit (EXITED)
and memory (in its BEAT), kills on request (KILL) and starts a replacement for each worker that exits.

A session ends when the coordinator is silent for the WELCOME's ``liveness`` (or never welcomes),
or RESETs it: the node then kills its workers (their calls were or will be rerouted by the
coordinator, which expires the session on its side) and joins again, backing off up to
``backoff_max`` seconds.  SIGTERM drains: DRAIN, the coordinator places nothing new here and
SHUTDOWNs each worker once its calls are answered, and the node leaves (BYE) when no worker is left.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import secrets
import shutil
import signal
import socket
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import zmq

from coordinator._core.processes import LocalProcess, worker_command  # a node starts workers as a pool does
from coordinator.nodes import wire
from coordinator.nodes.auth import curve_client
from coordinator.nodes.errors import SessionEnded
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

__all__ = ["Node", "NodeSettings", "run_all", "split_workers"]

log = logging.getLogger("coordinator.nodes")

_POLL_MS: Final = 50
_STDERR_TAIL: Final = 4096


@dataclass(frozen=True, slots=True, kw_only=True)
class NodeSettings:
    join: str
    secret_key: Path
    server_key: Path
    workers: int = field(default_factory=lambda: max(1, len(os.sched_getaffinity(0))))
    name: str = field(default_factory=socket.gethostname)
    group: str = ""
    """Node group: a tenant's dedicated workers may be pinned to one
    (``PoolConfig.dedicated_node_groups``)."""
    backoff_max: float = 5.0
    """Longest pause between two attempts to join."""
    welcome_timeout: float = 5.0
    """A HELLO unanswered this long: the coordinator is unreachable or refused our key; try again."""
    drain_timeout: float = 300.0
    """SIGTERM: the longest the node waits for its workers' calls before leaving anyway."""


@dataclass(eq=False)
class _Child:
    identity: bytes
    process: LocalProcess
    started: float
    stderr_tail: bytearray = field(default_factory=bytearray)


class Node:
    """Run with :meth:`run` (blocks); :meth:`stop` (the SIGTERM handler) asks it to drain and leave."""

    def __init__(self, settings: NodeSettings) -> None:
        self.settings = settings
        self._stopping = False
        self._children: dict[bytes, _Child] = {}
        self._by_fd: dict[int, _Child] = {}
        self._next_spawn = 0.0
        self._quick_exits = 0
        self._welcome: Welcome | None = None
        self._draining = 0.0

    def stop(self, *_: Any) -> None:
        self._stopping = True

    def run(self) -> int:
        """Join, serve, rejoin after a loss; return 0 once drained (SIGTERM)."""
        self._workdir = tempfile.mkdtemp(prefix="rhaipool-node-")  # 0700: only our workers reach the socket
        self._context = zmq.Context(io_threads=1)
        self._router = self._context.socket(zmq.ROUTER)
        # MAXMSGSIZE as at the coordinator: an oversized frame from a worker cuts that worker's pipe
        # here, instead of reaching the coordinator and cutting this node's whole session there
        limits = ((zmq.ROUTER_MANDATORY, 1), (zmq.LINGER, 0), (zmq.SNDHWM, 0), (zmq.RCVHWM, 0),
                  (zmq.MAXMSGSIZE, MAX_BODY_BYTES + 4096))  # fmt: skip
        for option, value in limits:
            self._router.setsockopt(option, value)
        self._endpoint = f"ipc://{self._workdir}/node.sock"
        self._router.bind(self._endpoint)
        backoff = 0.1
        try:
            while not self._stopping:
                welcomed, leave = self._session()
                self._kill_all()
                if leave or self._stopping:
                    break
                backoff = 0.1 if welcomed else min(self.settings.backoff_max, backoff * 2)
                self._pause(backoff * random.uniform(0.5, 1.0))
        finally:
            self._kill_all()
            self._router.close(0)
            self._context.term()
            shutil.rmtree(self._workdir, ignore_errors=True)
        return 0

    def _pause(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while not self._stopping and time.monotonic() < deadline:
            time.sleep(0.05)

    # -- one session ---------------------------------------------------------
    def _session(self) -> tuple[bool, bool]:
        """(welcomed, leave): serve one connection to the coordinator until it ends."""
        s = self.settings
        dealer = self._context.socket(zmq.DEALER)
        dealer.setsockopt(zmq.ROUTING_ID, b"N" + secrets.token_bytes(15))
        for option, value in (
            (zmq.LINGER, 0),
            (zmq.SNDHWM, 0),
            (zmq.RCVHWM, 0),
            (zmq.RECONNECT_IVL, 100),
            (zmq.RECONNECT_IVL_MAX, 1000),
            (zmq.MAXMSGSIZE, MAX_BODY_BYTES + 4096),
        ):
            dealer.setsockopt(option, value)
        curve_client(dealer, s.secret_key, s.server_key)
        dealer.connect(s.join)
        self._dealer, self._welcome, self._draining = dealer, None, 0.0
        self._heard = self._hello_at = time.monotonic()
        self._beat_at = 0.0
        self._send(Hello(s.name, s.workers, os.getpid(), sorted(SUPPORTED_VERSIONS), s.group))
        self._poller = zmq.Poller()
        self._poller.register(dealer, zmq.POLLIN)
        self._poller.register(self._router, zmq.POLLIN)
        for fd in self._by_fd:
            self._poller.register(fd, zmq.POLLIN)
        try:
            while True:
                self._serve_once()
        except SessionEnded as end:
            log.warning("session with %s ended: %s", s.join, end)
            if end.leave:
                dealer.close(linger=1000)  # let BYE out
            return self._welcome is not None, end.leave
        finally:
            dealer.close(0)

    def _send(self, message: NodeMessage) -> None:
        wire.send(self._dealer, [encode_node(message)])

    def _serve_once(self) -> None:
        ready = dict(self._poller.poll(_POLL_MS))
        now = time.monotonic()
        for frames in wire.receive(self._dealer):
            self._heard = now
            self._from_coordinator(frames)
        for frames in wire.receive(self._router):
            if len(frames) == 2 and frames[0] in self._children:
                wire.send(self._dealer, frames)
        for fd in ready:
            child = self._by_fd.get(fd) if isinstance(fd, int) else None
            if child is not None:
                self._on_child_fd(child, fd)
        self._timers(now)

    def _from_coordinator(self, frames: list[bytes]) -> None:
        if len(frames) == 2:
            if frames[0] in self._children:
                wire.send(self._router, frames)
            return
        try:
            message = decode_node(frames)
        except ProtocolError as exc:
            log.warning("bad message from the coordinator: %s", exc)
            return
        if isinstance(message, Welcome) and self._welcome is None:
            self._welcome = message
            log.info("joined %s as %s", self.settings.join, self.settings.name)
        elif isinstance(message, KillWorker):
            child = self._children.get(message.worker)
            if child is not None:
                child.process.kill()
        elif isinstance(message, Reset):
            raise SessionEnded(f"reset by the coordinator: {message.reason}")

    def _timers(self, now: float) -> None:
        s, welcome = self.settings, self._welcome
        if welcome is None:
            if self._stopping:
                raise SessionEnded("stopped before joining", leave=True)
            if now - self._hello_at > s.welcome_timeout:
                raise SessionEnded(f"no WELCOME within {s.welcome_timeout:g} s")
            return
        if now - self._heard > welcome.liveness:
            raise SessionEnded(f"the coordinator was silent for {now - self._heard:.1f} s")
        if now - self._beat_at >= welcome.heartbeat:
            self._beat_at = now
            self._send(NodeBeat(self._rss()))
        if self._stopping and not self._draining:
            self._draining = now
            self._send(Drain("SIGTERM"))
        if self._draining:
            if not self._children:
                self._send(Bye("drained"))
                raise SessionEnded("drained", leave=True)
            if now - self._draining > s.drain_timeout:
                self._send(Bye(f"drain timeout ({s.drain_timeout:g} s)"))
                raise SessionEnded("drain timeout", leave=True)
        elif len(self._children) < s.workers and now >= self._next_spawn:
            self._spawn(welcome)

    def _rss(self) -> dict[bytes, int]:
        rss = {}
        for identity, child in self._children.items():
            if (memory := child.process.memory()) is not None:
                rss[identity] = memory
        return rss

    # -- workers ---------------------------------------------------------------
    def _spawn(self, welcome: Welcome) -> None:
        identity = secrets.token_bytes(8)
        try:
            process = LocalProcess.start(
                worker_command(self._endpoint, identity, welcome.worker_args), self._workdir
            )
        except OSError as exc:
            log.error("cannot start a worker: %s", exc)
            self._next_spawn = time.monotonic() + 1.0
            return
        child = _Child(identity, process, time.monotonic())
        self._children[identity] = child
        for fd in (process.pidfd, process.stderr_fd):
            self._by_fd[fd] = child
            self._poller.register(fd, zmq.POLLIN)
        self._send(Spawned(identity, process.pid))

    def _on_child_fd(self, child: _Child, fd: int) -> None:
        if fd != child.process.pidfd:
            self._read_stderr(child)
            return
        self._read_stderr(child)
        self._forget(child)
        returncode = child.process.reap()
        child.process.close_output()
        assert returncode is not None  # a wait without a timeout
        line = child.stderr_tail.decode("utf-8", "replace").strip().splitlines()
        self._send(WorkerExited(child.identity, returncode, line[-1][:400] if line else ""))
        if time.monotonic() - child.started < 1.0 and not self._stopping:
            self._quick_exits += 1  # exits at start-up: pace the replacements
            self._next_spawn = time.monotonic() + min(5.0, 0.05 * 2**self._quick_exits)
        else:
            self._quick_exits = 0

    def _read_stderr(self, child: _Child) -> None:
        data = child.process.read_output()
        if data is None:
            return
        if not data:
            self._unwatch(child.process.stderr_fd)
        child.stderr_tail += data
        del child.stderr_tail[:-_STDERR_TAIL]

    def _unwatch(self, fd: int) -> None:
        if self._by_fd.pop(fd, None) is not None:
            with contextlib.suppress(KeyError):
                self._poller.unregister(fd)

    def _forget(self, child: _Child) -> None:
        """Stop watching ``child`` (it exited; the caller reaps it)."""
        self._children.pop(child.identity, None)
        self._unwatch(child.process.pidfd)
        self._unwatch(child.process.stderr_fd)

    def _kill_all(self) -> None:
        """End every worker of the session (their calls are the coordinator's to reroute)."""
        for child in list(self._children.values()):
            child.process.kill()
            self._forget(child)
            child.process.reap()
            child.process.close_output()


def split_workers(total: int, coordinators: int) -> list[int]:
    """``total`` workers shared out over the coordinators joined (each gets at least one)."""
    share, extra = divmod(total, coordinators)
    return [max(1, share + (i < extra)) for i in range(coordinators)]


def run_all(nodes: list[Node]) -> int:
    """Serve several coordinators at once (one thread each); SIGTERM/SIGINT drain every one, then return.

    A fleet shared by coordinators that each own a shard of the tenants: one node process, one session
    and its own workers per coordinator, each coordinator seeing only its share.
    """

    def stop_all(*_: Any) -> None:
        for node in nodes:
            node.stop()

    signal.signal(signal.SIGTERM, stop_all)
    signal.signal(signal.SIGINT, stop_all)
    codes: list[int] = []
    threads = [
        threading.Thread(target=lambda n=node: codes.append(n.run()), name=f"node-{i}")
        for i, node in enumerate(nodes)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        while thread.is_alive():
            thread.join(0.2)  # wake up for signals: they run on the main thread
    return max(codes, default=0)
