"""Why the pool kills a worker: ``KillReason``, and which of its kills blame the call being run.

The pool's own vocabulary, never sent on the wire: it names the same events the wire's ERROR
classes describe, and ``blames`` is the one place that says which of its own kills the pool holds a
call responsible for.  A ``StrEnum``: a member *is* its string, as ``proto.vocabulary``'s are.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["KillReason"]


class KillReason(enum.StrEnum):
    """Why the pool SIGKILLed a worker; the first reason given is the one reported."""

    DEADLINE = "deadline"
    """A call overran its hard deadline."""
    MEMORY = "memory"
    """The psutil watchdog saw the worker over its memory limit."""
    PROTOCOL = "protocol"
    """The worker broke the wire protocol (a liar is stopped)."""
    FROZEN = "frozen (SIGSTOP)"
    """The deadline passed while the worker was stopped: it could not have been running the call."""
    UNREACHABLE = "unreachable"
    """Its socket refused a message the pool had to deliver."""
    SPAWN_TIMEOUT = "spawn timeout"
    """It never said READY."""
    HEARTBEAT_LOST = "heartbeat lost"
    """It went silent for longer than the heartbeat allows."""
    SHUTDOWN_GRACE_EXPIRED = "shutdown grace expired"
    """It did not leave after SHUTDOWN."""
    POOL_CLOSED = "pool closed"
    """The pool is closing."""

    @property
    def blames(self) -> bool:
        """Whether the call the worker was killed for (if any) is held responsible for the death."""
        return self in _BLAMING


_BLAMING: Final = frozenset({KillReason.DEADLINE, KillReason.MEMORY, KillReason.PROTOCOL})
