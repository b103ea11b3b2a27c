"""Prometheus metrics of the service (``GET /metrics``), on the official ``prometheus_client``.

Only the service exports: the pool's own counters (workers by state, exits by reason, queue depth,
worker memory, which workers report in replies and heartbeats) are read from ``Pool.statistics()`` and
``Pool.workers()`` at scrape time; request-level counters and histograms are kept here. Labels are
bounded: the operation (a route's endpoint name), the tenant (configured ids only) and the outcome;
never a call id or a script hash.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from coordinator.service.state import Service

__all__ = ["CONTENT_TYPE", "Metrics"]

CONTENT_TYPE: Final = "text/plain; version=0.0.4; charset=utf-8"
_RESTART_REASONS: Final = ("memory", "cpu", "deadline", "crash", "recycle", "protocol")


def _reason(raw: str) -> str:
    """Fold the supervisor's exit reasons onto the documented label values."""
    raw = raw.lower()
    for reason, words in (
        ("memory", ("memory", "rss", "oom")),
        ("cpu", ("cpu", "sigxcpu")),
        ("deadline", ("deadline", "timeout", "hung")),
        ("recycle", ("recycle", "retire", "max_calls", "age", "idle", "shutdown", "goodbye")),
        ("protocol", ("protocol", "lying", "malformed")),
    ):
        if any(w in raw for w in words):
            return reason
    return "crash"


class _PoolCollector(Collector):
    """Reads the pool at scrape time."""

    def __init__(self, service: Service) -> None:
        self._service = service

    def collect(self) -> Iterator[Any]:
        pool = getattr(self._service, "pool", None)
        if pool is None:
            return
        stats = pool.statistics()
        states = GaugeMetricFamily("rhaipool_workers", "Live worker processes by state.", labels=["state"])
        for state in ("active", "spare", "starting", "draining"):
            states.add_metric([state], stats.workers.get(state, 0))
        yield states
        restarts = CounterMetricFamily(
            "rhaipool_worker_restarts",
            "Worker exits that led to a replacement, by reason.",
            labels=["reason"],
        )
        folded = dict.fromkeys(_RESTART_REASONS, 0)
        for raw, count in stats.exit_reasons.items():
            folded[_reason(raw)] += count
        for reason, count in folded.items():
            restarts.add_metric([reason], count)
        yield restarts
        yield GaugeMetricFamily("rhaipool_queue_depth", "Calls waiting for a worker.", value=stats.queued)
        yield GaugeMetricFamily(
            "rhaipool_worker_memory_bytes",
            "Resident memory of all workers.",
            value=sum(w.rss for w in pool.workers()),
        )
        yield CounterMetricFamily(
            "rhaipool_pool_calls_failed", "Pool calls that failed.", value=stats.calls_failed
        )


class Metrics:
    """One registry per service (tests run several services in one process)."""

    def __init__(self, service: Service) -> None:
        self.registry = CollectorRegistry()
        self.calls = Counter(
            "rhaipool_calls", "API calls by operation, tenant and outcome.", ["kind", "tenant", "outcome"],
            registry=self.registry,
        )  # fmt: skip
        self.duration = Histogram(
            "rhaipool_call_duration_seconds", "Time from request to reply, by operation.", ["kind"],
            registry=self.registry,
            buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )  # fmt: skip
        self.inflight = Gauge(
            "rhaipool_inflight_calls",
            "API calls being answered, by tenant.",
            ["tenant"],
            registry=self.registry,
        )
        self.refusals = Counter(
            "rhaipool_quota_refusals", "Calls refused by backpressure or quotas, by tenant.", ["tenant"],
            registry=self.registry,
        )  # fmt: skip
        self.registry.register(_PoolCollector(service))

    def observe(self, kind: str, tenant: str, status: int, seconds: float) -> None:
        """Count one finished API call."""
        outcome = "ok" if status < 400 else "client_error" if status < 500 else "error"
        self.calls.labels(kind, tenant, outcome).inc()
        self.duration.labels(kind).observe(seconds)
        if status in (429, 503):
            self.refusals.labels(tenant).inc()

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)
