"""The coordinator's two records of one worker, each with a single owner.

    WorkerProcess  (owned by the Supervisor)          Placement  (owned by the Dispatcher)
    ┌──────────────────────────────────────┐          ┌─────────────────────────────────────┐
    │ identity, process, state             │◀─────────│ process  (read only)                │
    │ ready_at, last_seen, capacity        │          │ attempts, inline, threaded, zombies │
    │ sandbox, probe, rss, rss_base, calls │          │ given_up, scripts (AST affinity)    │
    │ kill_reason, goodbye, shutdown_sent  │          │ alone, reserved (isolation)         │
    │ stderr_tail, exit_reason             │          │ kill_target (whom a kill blames)    │
    └──────────────────────────────────────┘          └─────────────────────────────────────┘

The supervisor writes only the process record; the dispatcher writes only the placement and reads
the process record through ``Placement.process``.  What one needs of the other's record it asks
through a method (``Supervisor.kill``, ``Supervisor.call_ended``, ``Events.idle``, ...).
"""

from __future__ import annotations

import enum
import signal
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from coordinator._core.kills import KillReason

if TYPE_CHECKING:
    from coordinator._core.calls import Attempt
    from coordinator._core.processes import Process

__all__ = ["Placement", "WorkerProcess", "WorkerState", "describe_exit"]


class WorkerState(enum.Enum):
    STARTING = "starting"
    SPARE = "spare"
    ACTIVE = "active"
    DRAINING = "draining"
    DEAD = "dead"


@dataclass(eq=False)
class WorkerProcess:
    """One worker process as the supervisor sees it: lifecycle, liveness, memory, why it exited."""

    id: str
    identity: bytes
    process: Process
    """Its OS process: spawned here (``LocalProcess``) or run by a node (``RemoteWorker``)."""
    started: float
    state: WorkerState = WorkerState.STARTING
    ready_at: float = 0.0
    """When READY arrived (0 until then)."""
    last_seen: float = 0.0
    capacity: int = 1
    sandbox: dict[str, Any] = field(default_factory=dict)
    probe: dict[str, Any] | None = None
    calls: int = 0
    """Calls it has answered (recycling by call count)."""
    rss_base: int = 0
    rss: int = 0
    kill_reason: KillReason | None = None
    """Why the pool killed it (the first reason given); ``None`` if it did not."""
    goodbye: str = ""
    shutdown_sent: float = 0.0
    stderr_tail: bytearray = field(default_factory=bytearray)
    exit_reason: str = ""

    @property
    def pid(self) -> int:
        return self.process.pid


@dataclass(eq=False)
class Placement:
    """What the dispatcher has placed on one ACTIVE (or draining) worker process."""

    process: WorkerProcess
    attempts: dict[int, Attempt] = field(default_factory=dict)
    inline: deque[Attempt] = field(default_factory=deque)
    threaded: int = 0
    zombies: dict[int, float] = field(default_factory=dict)
    """Wire ids of attempts given up on (deadline/cancel) whose late reply is expected and dropped."""
    given_up: dict[int, Attempt] = field(default_factory=dict)
    """Threaded attempts given up on that the worker still runs (no late reply yet), by wire id: one
    that outlives ``kill_grace`` has its worker killed, and any may be what a death blames."""
    scripts: set[tuple[str, str]] = field(default_factory=set)
    alone: bool = False
    """It runs a suspect's call, so nothing else is placed here (``coordinator._core.isolation``)."""
    reserved: bool = False
    """Kept free for a suspect's call: nothing new is placed here until it is empty."""
    kill_target: Attempt | None = None
    """The attempt the dispatcher had the process killed for (deadline, protocol): blamed at its death."""

    @property
    def id(self) -> str:
        return self.process.id

    @property
    def identity(self) -> bytes:
        return self.process.identity

    @property
    def head(self) -> Attempt | None:
        """The inline (region/load) attempt currently running on the worker's loop thread."""
        return self.inline[0] if self.inline else None

    @property
    def idle(self) -> bool:
        return not self.attempts


def describe_exit(returncode: int | None) -> str:
    """``SIGKILL(-9)``-style names, as loky's ``_format_exitcodes`` does."""
    if returncode is None:
        return "unknown"
    if returncode < 0:
        try:
            return f"{signal.Signals(-returncode).name}({returncode})"
        except ValueError:
            return f"signal {-returncode}"
    return f"EXIT({returncode})"
