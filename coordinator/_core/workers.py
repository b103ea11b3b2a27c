"""``Worker``: the coordinator's record of one worker process, shared by supervisor and dispatcher."""

from __future__ import annotations

import enum
import signal
import subprocess
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from coordinator._core.calls import Attempt

__all__ = ["Worker", "WorkerState", "describe_exit"]


class WorkerState(enum.Enum):
    STARTING = "starting"
    SPARE = "spare"
    ACTIVE = "active"
    DRAINING = "draining"
    DEAD = "dead"


@dataclass(eq=False)
class Worker:
    """A worker process and every call attempt it holds."""

    id: str
    identity: bytes
    process: subprocess.Popen[bytes]
    started: float
    state: WorkerState = WorkerState.STARTING
    ready_at: float = 0.0
    last_seen: float = 0.0
    capacity: int = 1
    sandbox: dict[str, Any] = field(default_factory=dict)
    probe: dict[str, Any] | None = None
    attempts: dict[int, Attempt] = field(default_factory=dict)
    inline: deque[Attempt] = field(default_factory=deque)
    threaded: int = 0
    zombies: dict[int, Any] = field(default_factory=dict)
    """Wire ids of attempts given up on (deadline/cancel) whose late reply is expected and dropped."""
    scripts: set[tuple[str, str]] = field(default_factory=set)
    alone: bool = False
    """It runs a suspect's call, so nothing else is placed here (``coordinator._core.isolation``)."""
    reserved: bool = False
    """Kept free for a suspect's call: nothing new is placed here until it is empty."""
    calls: int = 0
    rss_base: int = 0
    rss: int = 0
    kill_reason: str = ""
    kill_target: Attempt | None = None
    goodbye: str = ""
    shutdown_sent: float = 0.0
    stderr_tail: bytearray = field(default_factory=bytearray)
    pidfd: int = -1
    exit_reason: str = ""

    @property
    def pid(self) -> int:
        return self.process.pid

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
