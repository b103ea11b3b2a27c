"""The trusted side of rhaipool: scheduling, region and provider runtimes, egress and the CLI.

Public API of the pool: ``Pool`` (asyncio) and ``SyncPool`` (blocking facade),
``ScriptHandle``, ``CallResult``/``CallStream``, the ``HostHandler`` protocol,
the config classes and the error tree of ``coordinator.errors``.
"""

from coordinator._core.calls import CallResult, CallStream, HostHandler, InvalidChunk
from coordinator._core.config import Deadlines, Limits, PoolConfig, Recycling, RetryPolicy, TenantQuotas
from coordinator._core.handles import ScriptHandle
from coordinator._core.pool import Pool, PoolStatistics, TenantUsage, WorkerInfo
from coordinator._core.sync import SyncPool
from coordinator.errors import (
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
    ProtocolError,
    Quarantined,
    QuotaExceeded,
    RhaipoolError,
    ScriptError,
    ScriptQuotaExceeded,
    ScriptTimeout,
    TooManyCallsInFlight,
    TooManyCallsQueued,
    WorkerCrashed,
    WorkerLost,
)

__version__ = "0.1.0"

__all__ = [
    "CallFailed",
    "CallResult",
    "CallStream",
    "Cancelled",
    "CompileError",
    "CpuQuotaExceeded",
    "Deadlines",
    "HostCallError",
    "HostHandler",
    "InvalidChunk",
    "LimitExceeded",
    "Limits",
    "LoadError",
    "MissingFunction",
    "NoWorkerAvailable",
    "Overloaded",
    "Pool",
    "PoolClosed",
    "PoolConfig",
    "PoolError",
    "PoolFamilyError",
    "PoolStatistics",
    "ProtocolError",
    "Quarantined",
    "QuotaExceeded",
    "Recycling",
    "RetryPolicy",
    "RhaipoolError",
    "ScriptError",
    "ScriptHandle",
    "ScriptQuotaExceeded",
    "ScriptTimeout",
    "SyncPool",
    "TenantQuotas",
    "TenantUsage",
    "TooManyCallsInFlight",
    "TooManyCallsQueued",
    "WorkerCrashed",
    "WorkerInfo",
    "WorkerLost",
]
