"""The coordinator's records of joined nodes and of their workers (``coordinator.nodes.link`` owns them).

``RemoteWorker`` is what the supervisor holds as a node worker's ``process``
(``coordinator._core.processes.Process``): its exit and memory are reported by the node, and
``kill`` is a message to it, sent through the link.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "DEFAULT_NODE_HEARTBEAT",
    "DEFAULT_NODE_LIVENESS",
    "LinkSettings",
    "NodeInfo",
    "NodeRecord",
    "RemoteWorker",
]

DEFAULT_NODE_HEARTBEAT: Final = 0.5
DEFAULT_NODE_LIVENESS: Final = 2.5
"""Seconds of silence before a node is expired: with the 0.1 s check, within 3 s (issue 15)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class LinkSettings:
    """Heartbeat interval and the silence after which either side gives the other up (``[nodes]``)."""

    heartbeat: float = DEFAULT_NODE_HEARTBEAT
    liveness: float = DEFAULT_NODE_LIVENESS


@dataclass(eq=False)
class RemoteWorker:
    """A node's worker process as the supervisor sees it (``coordinator._core.processes.Process``)."""

    node: str
    pid: int
    send_kill: Callable[[bytes], None]
    identity: bytes
    group: str = ""
    returncode: int | None = None
    """Its exit status, once its node reported it (EXITED)."""
    rss: int = 0
    """Its resident bytes, as its node last reported them (BEAT)."""
    local: bool = field(default=False, init=False)

    def kill(self) -> None:
        self.send_kill(self.identity)

    def alive(self) -> bool:
        """Until its node reports the exit (or the node is expired): the link tells the supervisor."""
        return self.returncode is None

    def memory(self) -> int | None:
        return self.rss

    def stopped(self) -> bool:
        """A SIGSTOP on another machine cannot be seen from here (its heartbeat loss makes suspects)."""
        return False

    def reap(self, timeout: float | None = None) -> int | None:
        return self.returncode


@dataclass(eq=False)
class NodeRecord:
    """One session of a joined node: who it is, when it was last heard, the workers it announced."""

    session: bytes
    name: str
    capacity: int
    pid: int
    last_heard: float
    group: str = ""
    public_key: bytes = b""
    """The z85 key its connection authenticated with: checked against the authorized keys every half beat."""
    last_sent: float = 0.0
    workers: dict[bytes, RemoteWorker] = field(default_factory=dict)
    draining: bool = False
    relayed: int = 0


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """One joined node, for tests, status and metrics."""

    name: str
    capacity: int
    workers: int
    draining: bool
    relayed: int
    """RHP frames received from its workers."""
    group: str = ""
