"""The coordinator's exceptions: the call family, the pool family and the service family's root.

Three of the eight families under ``RhaipoolError`` (``proto.errors``) are exported here; the call and
pool families are defined with the pool's engine (``coordinator._core.errors``), the service family's
root here:

- ``CallFailed``: one call ended without a value (the script failed, ran out of a budget, lost its
  worker, was cancelled or quarantined); ``.call_id .tenant .script .sha .worker_id .cause``.
- ``PoolFamilyError``: the pool could not take, load or host a call. ``PoolError`` under it is the
  pool refusing a call (closed, overloaded, no worker, a tenant's quota); ``LoadError`` a script that
  could not be loaded; ``HostCallError`` a host handler's throw; ``coordinator.nodes.errors`` hangs
  the remote workers' errors here too.
- ``ServiceFamilyError``: ``rhaipool serve`` and its client. ``ServiceError`` under it is the
  client's side of a failed request; ``coordinator.service.errors`` hangs the service's own here.

The README draws the whole tree (``tests/test_error_tree.py`` renders it from the classes and keeps
the drawing true). Every error names its cause in ``str()``; the structured fields are for programs.
"""

from __future__ import annotations

from typing import Any

from coordinator._core.errors import (
    CallFailed,
    Cancelled,
    CompileError,
    CpuQuotaExceeded,
    HostCallError,
    LimitExceeded,
    LoadError,
    MissingFunction,
    NoWorkerAvailable,
    Overloaded,
    PoolClosed,
    PoolError,
    PoolFamilyError,
    Quarantined,
    QuotaExceeded,
    ScriptError,
    ScriptQuotaExceeded,
    ScriptTimeout,
    TooManyCallsInFlight,
    TooManyCallsQueued,
    WorkerCrashed,
    WorkerLost,
)
from proto.errors import ProtocolError, RhaipoolError

__all__ = [
    "CallFailed",
    "Cancelled",
    "CompileError",
    "CpuQuotaExceeded",
    "HostCallError",
    "LimitExceeded",
    "LoadError",
    "MissingFunction",
    "NoWorkerAvailable",
    "Overloaded",
    "PoolClosed",
    "PoolError",
    "PoolFamilyError",
    "ProtocolError",
    "Quarantined",
    "QuotaExceeded",
    "RhaipoolError",
    "ScriptError",
    "ScriptQuotaExceeded",
    "ScriptTimeout",
    "ServiceError",
    "ServiceFamilyError",
    "TooManyCallsInFlight",
    "TooManyCallsQueued",
    "WorkerCrashed",
    "WorkerLost",
]


class ServiceFamilyError(RhaipoolError):
    """The root of the service family: ``rhaipool serve`` refused or failed something, or its client did."""


class ServiceError(ServiceFamilyError):
    """``coordinator.client``: the service answered 4xx/5xx (or could not be reached: status 0)."""

    def __init__(self, status: int, error: Any, retry_after: float | None = None) -> None:
        self.status, self.error, self.retry_after = status, error, retry_after
        self.message = error.get("message", str(error)) if isinstance(error, dict) else str(error)
        super().__init__(f"{status}: {self.message}" if status else self.message)
