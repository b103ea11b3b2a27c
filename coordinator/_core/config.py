"""Keyword-only, frozen pool configuration; every default is a ``DEFAULT_*`` constant here."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "DEFAULT_CALL_TIMEOUT",
    "DEFAULT_HEARTBEAT",
    "DEFAULT_KILL_GRACE",
    "DEFAULT_MEMORY_BYTES",
    "DEFAULT_PROVIDER_CAPACITY",
    "DEFAULT_QUEUE_SIZE",
    "DEFAULT_RESIDENT_MAX_BYTES",
    "DEFAULT_RESIDENT_MAX_LISTS",
    "DEFAULT_SCRIPT_CACHE_BYTES",
    "DEFAULT_STREAM_BUFFER_BYTES",
    "DEFAULT_TENANT_MAX_SCRIPTS",
    "DEFAULT_TENANT_MAX_SCRIPT_BYTES",
    "DEFAULT_WATCHDOG_RSS_BYTES",
    "Deadlines",
    "Limits",
    "PoolConfig",
    "Recycling",
    "RetryPolicy",
    "TenantQuotas",
]

DEFAULT_MEMORY_BYTES: Final = 2 << 30
DEFAULT_WATCHDOG_RSS_BYTES: Final = 1 << 30
DEFAULT_CALL_TIMEOUT: Final = 30.0
DEFAULT_KILL_GRACE: Final = 1.0
DEFAULT_HEARTBEAT: Final = 0.25
DEFAULT_QUEUE_SIZE: Final = 10_000
DEFAULT_PROVIDER_CAPACITY: Final = 64
DEFAULT_SCRIPT_CACHE_BYTES: Final = 64 << 20
DEFAULT_STREAM_BUFFER_BYTES: Final = 64 << 20
DEFAULT_RESIDENT_MAX_LISTS: Final = 256
DEFAULT_RESIDENT_MAX_BYTES: Final = 16 << 20
DEFAULT_TENANT_MAX_SCRIPTS: Final = 256
DEFAULT_TENANT_MAX_SCRIPT_BYTES: Final = 32 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Per-worker process limits (rlimits applied by the sandbox, RSS enforced by the watchdog)."""

    memory_bytes: int = DEFAULT_MEMORY_BYTES
    """RLIMIT_AS of each worker (address space, so thread stacks count)."""
    watchdog_rss_bytes: int = DEFAULT_WATCHDOG_RSS_BYTES
    """The coordinator kills a worker whose resident memory exceeds this (psutil)."""
    cpu_seconds: int = 3600
    open_files: int = 64
    file_size: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class Deadlines:
    """Layered deadlines: engine wall clock (``call``) → the coordinator answers at the deadline →
    ``kill_grace`` later, a worker still running the call is killed.

    A call's timeout (``call``, or ``timeout=`` per call) starts with its first attempt and bounds
    the whole call, re-runs included: a re-run gets only what is left, and the call is answered at
    its timeout whatever its worker does (``kill_grace`` delays only the kill).  Time spent waiting
    in the queue is bounded apart, by ``queue``.
    """

    call: float = DEFAULT_CALL_TIMEOUT
    kill_grace: float = DEFAULT_KILL_GRACE
    spawn: float = 30.0
    heartbeat: float = DEFAULT_HEARTBEAT
    liveness: int = 8
    """A worker silent for ``liveness × heartbeat`` seconds (outside an inline call) is killed."""
    queue: float = 60.0
    """Longest a call may wait for a worker before it fails with ``Overloaded``."""
    shutdown_grace: float = 2.0


@dataclass(frozen=True, slots=True, kw_only=True)
class Recycling:
    """When a healthy worker is replaced by a warm spare (no call is failed or delayed)."""

    max_calls: int = 100_000
    max_age: float = 3600.0
    max_rss_growth: int = 256 << 20


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """Re-runs after worker deaths a call did not cause, and the quarantine circuit breaker."""

    max_retries: int = 2
    strikes: int = 3
    """Worker deaths attributed to one script within ``window`` seconds that quarantine it."""
    window: float = 60.0
    quarantine: float = 30.0
    tenant_strikes: int | None = None
    """Deaths blamed on one tenant's calls (any script) within ``window`` that quarantine the whole
    tenant; ``None``: twice ``strikes``.  Editing a script changes its hash, not its tenant."""


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantQuotas:
    """One tenant's quotas (``None``: no cap); ``Pool.set_tenant_quotas`` sets them per tenant, live.

    The names are the service's config keys (``[serve.tenant_defaults]``, ``[tenants.<id>]``); the
    defaults are an unconfigured pool's, and ``PoolConfig``'s ``tenant_*`` fields are the initial default.
    """

    max_calls: int | None = None
    """Unfinished calls (queued + running); beyond, ``TooManyCallsInFlight``."""
    max_inflight: int | None = None
    """Calls placed at workers at once; over it, further calls wait their turn in the queue."""
    max_queued: int | None = None
    """Calls waiting for a worker; beyond, ``TooManyCallsQueued``."""
    cpu_seconds_per_minute: float | None = None
    """CPU-seconds used per sliding minute; beyond, ``CpuQuotaExceeded``."""
    max_loaded_scripts: int | None = DEFAULT_TENANT_MAX_SCRIPTS
    """Scripts held loaded; a load beyond forgets the least recently loaded one with no call running,
    or fails with ``ScriptQuotaExceeded``."""
    max_loaded_script_bytes: int | None = DEFAULT_TENANT_MAX_SCRIPT_BYTES
    """Source bytes held loaded (the same rule as ``max_loaded_scripts``)."""

    def __post_init__(self) -> None:
        counts = ("max_calls", "max_inflight", "max_queued", "max_loaded_scripts", "max_loaded_script_bytes")
        for name in counts:
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 0):
                raise ValueError(f"{name} must be a whole number of at least 0 (or unset), not {value!r}")
        cpu = self.cpu_seconds_per_minute
        if cpu is not None and (type(cpu) not in (int, float) or not 0 <= cpu < float("inf")):
            raise ValueError(f"cpu_seconds_per_minute must be a number of at least 0 (or unset), not {cpu!r}")


def _cpu_count() -> int:
    return max(1, len(os.sched_getaffinity(0)))


@dataclass(frozen=True, slots=True, kw_only=True)
class PoolConfig:
    """Everything a ``Pool`` needs; ``workers=None`` means one per usable CPU."""

    workers: int | None = None
    spares: int = 1
    queue_size: int = DEFAULT_QUEUE_SIZE
    provider_capacity: int = DEFAULT_PROVIDER_CAPACITY
    """Concurrent threaded (provider/stream) calls one worker may hold."""
    tenant_max_inflight: int | None = None
    """Calls of one tenant placed at workers at once (``None``: no cap); over it, the tenant's further
    calls wait their turn in the queue while other tenants' calls are placed.  This and the other
    ``tenant_*`` quotas are every tenant's initial ones (``tenant_quotas``); ``Pool.set_tenant_quotas``
    sets them per tenant while the pool runs."""
    tenant_fair_share: bool = True
    """While other tenants have calls waiting, a tenant holding slots / tenants-present of the workers'
    slots gets no new placement (its calls wait); alone, a tenant may use the whole pool."""
    tenant_max_calls: int | None = None
    """Unfinished calls (queued + running) one tenant may have; beyond, ``TooManyCallsInFlight``."""
    tenant_max_queued: int | None = None
    """Calls of one tenant waiting for a worker; beyond, ``TooManyCallsQueued``.  (The queue as a
    whole is bounded by ``queue_size``, where the tenant holding the most loses its newest.)"""
    tenant_cpu_seconds_per_minute: float | None = None
    """CPU-seconds one tenant's calls may use per sliding minute; beyond, ``CpuQuotaExceeded``."""
    tenant_max_scripts: int | None = DEFAULT_TENANT_MAX_SCRIPTS
    """Scripts one tenant holds loaded; a load beyond forgets its least recently loaded one with no
    call running, or fails with ``ScriptQuotaExceeded``."""
    tenant_max_script_bytes: int | None = DEFAULT_TENANT_MAX_SCRIPT_BYTES
    """Source bytes one tenant holds loaded (the same rule as ``tenant_max_scripts``)."""
    script_cache_bytes: int = DEFAULT_SCRIPT_CACHE_BYTES
    """Script sources the coordinator keeps in total, across tenants (LRU; a forgotten source is sent
    again from the caller's handle, or compiled again on the next load)."""
    dedicated_workers: Mapping[str, int] = field(default_factory=dict)
    """Tenants that get workers of their own, and how many (taken out of ``workers``, which must
    keep at least one shared): their calls run only there, and nobody else's does.  The initial set:
    ``Pool.set_dedicated`` changes it (and ``dedicated_node_groups``) while the pool runs."""
    dedicated_node_groups: Mapping[str, str] = field(default_factory=dict)
    """Tenants (of ``dedicated_workers``) whose own workers are taken only from nodes of this group
    (``rhaipool node --group``), not out of ``workers``; no other dedicated tenant takes from a group."""
    resident_max_lists: int = DEFAULT_RESIDENT_MAX_LISTS
    """Region entry lists each worker keeps between calls (``worker/resident.py``), least recently
    used out first; a list a worker no longer holds is sent again whole, never lost."""
    resident_max_bytes: int = DEFAULT_RESIDENT_MAX_BYTES
    """Bytes (msgpack sizes of the items) of the region entry lists each worker keeps, the same rule;
    the default is the largest CALL body, so any list that can be sent at all can be kept."""
    region_pipeline: int = 2
    """Region calls queued at one worker (1 running + N-1 waiting): hides the round trip."""
    stream_window: int = 16
    """Un-acknowledged chunks allowed per stream, in each direction."""
    stream_buffer_bytes: int = DEFAULT_STREAM_BUFFER_BYTES
    """Stream chunks the pool buffers for their consumers, in bytes, across all streams: once used,
    a stream that is not read gets no more credit (its worker waits) until chunks are taken; a
    stream holding nothing still gets one chunk at a time (``coordinator._core.streambudget``)."""
    probe: bool = False
    """Test only: start workers with ``--probe`` so READY carries sandbox probe results."""
    limits: Limits = field(default_factory=Limits)
    deadlines: Deadlines = field(default_factory=Deadlines)
    recycling: Recycling = field(default_factory=Recycling)
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    @property
    def tenant_quotas(self) -> TenantQuotas:
        """The quotas every tenant starts with, from the ``tenant_*`` fields."""
        return TenantQuotas(
            max_calls=self.tenant_max_calls,
            max_inflight=self.tenant_max_inflight,
            max_queued=self.tenant_max_queued,
            cpu_seconds_per_minute=self.tenant_cpu_seconds_per_minute,
            max_loaded_scripts=self.tenant_max_scripts,
            max_loaded_script_bytes=self.tenant_max_script_bytes,
        )

    @property
    def worker_count(self) -> int:
        return self.workers if self.workers is not None else _cpu_count()
