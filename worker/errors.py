"""The worker's exceptions: how a call ends inside the sandbox, never the worker itself.

``WorkerError`` is the worker family's root: ``CallAborted`` (a host function's call was cancelled:
ends the script as ``Cancelled``), ``DeadlineReached`` (a host function's wait outlived the deadline:
ends it as ``ScriptTimeout``) and ``ScriptFailure`` (a failed compile or call, already in the shape
of a wire ERROR). The README draws the whole tree.

They live under the one root of ``proto.errors`` (the worker never imports the coordinator, and
``proto`` is below both), so the whole project has one exception tree.
"""

from __future__ import annotations

from typing import Any

from proto.errors import RhaipoolError
from proto.vocabulary import ErrorClass

__all__ = ["CallAborted", "DeadlineReached", "ScriptFailure", "WorkerError"]


class WorkerError(RhaipoolError):
    """Raised inside a worker: a call ends, never the worker."""


class CallAborted(WorkerError):
    """Raised by a host function when its call was cancelled; ends the script as ``Cancelled``."""


class DeadlineReached(WorkerError):
    """Raised by a host function whose wait outlived the call's deadline;
    ends the script as ``ScriptTimeout``."""


class ScriptFailure(WorkerError):
    """A failed compile or call, already in the shape of a wire ERROR message."""

    def __init__(
        self,
        cls: ErrorClass,
        message: str,
        *,
        kind: str = "",
        line: int | None = None,
        column: int | None = None,
        value: Any = None,
        limit: str | None = None,
    ) -> None:
        super().__init__(message)
        self.cls, self.message, self.kind = cls, message, kind
        self.line, self.column, self.value, self.limit = line, column, value, limit
