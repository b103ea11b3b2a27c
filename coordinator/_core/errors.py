"""The core's exceptions: the call family and the pool family (``coordinator.errors`` is their public home).

    CallFailed        one call ended without a value (the script failed, ran out of a budget, lost
                      its worker, was cancelled or quarantined): ``.call_id .tenant .script .sha``
                      ``.worker_id .cause``
    PoolFamilyError   the pool could not take, load or host a call: ``PoolError`` (closed, overloaded,
                      no worker, a tenant's quota), ``LoadError``, ``HostCallError``

Defined here so that the core depends on nothing above it; ``coordinator.errors`` re-exports every
name, and the README draws the whole tree.
"""

from __future__ import annotations

from typing import Any

from proto.errors import RhaipoolError

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
    "Quarantined",
    "QuotaExceeded",
    "ScriptError",
    "ScriptQuotaExceeded",
    "ScriptTimeout",
    "TooManyCallsInFlight",
    "TooManyCallsQueued",
    "WorkerCrashed",
    "WorkerLost",
]


class PoolFamilyError(RhaipoolError):
    """The root of the pool family: the pool could not take, load or host a call, or reach a worker."""


class HostCallError(PoolFamilyError):
    """Raise from a host handler to make the script see ``throw value`` (catchable)."""

    def __init__(self, value: Any) -> None:
        super().__init__(str(value))
        self.value = value


class LoadError(PoolFamilyError):
    """A script could not be loaded; nothing was cached for it."""

    def __init__(self, message: str, *, name: str = "", sha: str = "") -> None:
        super().__init__(f"{name or '<script>'}: {message}")
        self.message, self.name, self.sha = message, name, sha


class CompileError(LoadError):
    """The source does not compile; ``line``/``column`` locate the first error."""

    def __init__(
        self,
        message: str,
        *,
        name: str = "",
        sha: str = "",
        line: int | None = None,
        column: int | None = None,
    ):
        super().__init__(message, name=name, sha=sha)
        self.line, self.column = line, column
        if line:
            self.args = (f"{name or '<script>'}:{line}:{column or 0}: {message}",)


class MissingFunction(LoadError):
    """A function the caller requires (name, arity) is not defined by the script."""

    def __init__(self, missing: list[tuple[str, int]], *, name: str = "", sha: str = "") -> None:
        listed = ", ".join(f"{fn}/{arity}" for fn, arity in missing)
        super().__init__(f"missing required function(s) {listed}", name=name, sha=sha)
        self.missing = missing


class CallFailed(RhaipoolError):
    """A call ended without a value; the fields say which call, where, and why."""

    def __init__(
        self,
        message: str,
        *,
        call_id: int = 0,
        tenant: str = "",
        script: str = "",
        sha: str = "",
        worker_id: str = "",
        cause: str = "",
    ) -> None:
        super().__init__(f"{script or '<script>'}: {message}" if script else message)
        self.message, self.call_id, self.tenant, self.script = message, call_id, tenant, script
        self.sha, self.worker_id, self.cause = sha, worker_id, cause or message


class ScriptError(CallFailed):
    """The script raised a runtime error or threw a value (``value``) nobody caught."""

    def __init__(
        self,
        message: str,
        *,
        rhai_class: str = "",
        line: int | None = None,
        column: int | None = None,
        value: Any = None,
        **fields: Any,
    ) -> None:
        super().__init__(message, **fields)
        self.rhai_class, self.line, self.column, self.value = rhai_class, line, column, value


class LimitExceeded(CallFailed):
    """A budget ran out: ``limit`` is operations, data_size, call_depth, memory, cpu or deadline."""

    def __init__(self, message: str, *, limit: str, rhai_class: str = "", **fields: Any) -> None:
        super().__init__(message, **fields)
        self.limit, self.rhai_class = limit, rhai_class


class ScriptTimeout(LimitExceeded):
    """The call's deadline passed (in the engine, or enforced by killing the worker)."""

    def __init__(self, message: str, **fields: Any) -> None:
        fields.setdefault("limit", "deadline")
        super().__init__(message, **fields)


class WorkerCrashed(CallFailed):
    """The worker died while running this call, and the call is held responsible (``exit_reason``)."""

    def __init__(self, message: str, *, exit_reason: str = "", **fields: Any) -> None:
        super().__init__(message, **fields)
        self.exit_reason = exit_reason


class WorkerLost(CallFailed):
    """The worker was lost for a reason outside the call, and the call could not be re-run."""

    def __init__(self, message: str, *, exit_reason: str = "", **fields: Any) -> None:
        super().__init__(message, **fields)
        self.exit_reason = exit_reason


class Cancelled(CallFailed):
    """The call was cancelled by its caller or by pool shutdown."""


class Quarantined(CallFailed):
    """The script killed workers too often; calls fail fast until ``until`` (monotonic seconds)."""

    def __init__(self, message: str, *, until: float = 0.0, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.until = until


class PoolError(PoolFamilyError):
    """The pool cannot take the call at all."""


class PoolClosed(PoolError):
    """The pool was closed (by you); no new calls are accepted."""


class Overloaded(PoolError):
    """Backpressure: the bounded queue is full, or a call waited longer than the queue timeout."""


class NoWorkerAvailable(PoolError):
    """Workers cannot be started (spawn keeps failing)."""


class QuotaExceeded(PoolError):
    """A tenant's quota refused the call or load; ``quota`` names it, ``limit`` is its configured bound."""

    def __init__(self, message: str, *, tenant: str = "", quota: str = "", limit: float = 0) -> None:
        super().__init__(f"tenant {tenant!r}: {message}" if tenant else message)
        self.tenant, self.quota, self.limit = tenant, quota, limit


class TooManyCallsInFlight(QuotaExceeded):
    """The tenant already holds ``tenant_max_calls`` unfinished calls (queued or running)."""


class TooManyCallsQueued(QuotaExceeded):
    """The tenant already has ``tenant_max_queued`` calls waiting for a worker."""


class CpuQuotaExceeded(QuotaExceeded):
    """The tenant used its ``tenant_cpu_seconds_per_minute``; ``retry_after`` seconds until room frees."""

    def __init__(self, message: str, *, retry_after: float = 0.0, **fields: Any) -> None:
        super().__init__(message, **fields)
        self.retry_after = retry_after


class ScriptQuotaExceeded(QuotaExceeded):
    """The tenant's loaded scripts (``tenant_max_scripts`` / ``tenant_max_script_bytes``) have no room."""
