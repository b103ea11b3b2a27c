"""Prometheus metrics of the service (``GET /metrics``), on the official ``prometheus_client``.

Only the service exports: the pool's own counters (workers by state, exits by reason, queue depth,
worker memory, which workers report in replies and heartbeats) are read from ``Pool.statistics()`` and
``Pool.workers()`` at scrape time, and so are egress's (requests by provider and status class, capacity
refusals, what it holds) and the providers' rate limiters (waits); request-level counters and
histograms are kept here, and the pool's per-call ones (queue wait, execution time, refusals) are fed
by ``observer.CallObserver``. Labels are bounded: the operation (a route's endpoint name), the tenant
(configured ids only), the script kind, the outcome, a provider's name, a status class, a reason;
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
_SECONDS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


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
        queued = GaugeMetricFamily(
            "rhaipool_tenant_queue_depth", "Calls waiting for a worker, by tenant.", labels=["tenant"]
        )
        for tenant, count in sorted(stats.queued_by_tenant.items()):
            queued.add_metric([tenant], count)
        yield queued
        held = GaugeMetricFamily(
            "rhaipool_tenant_running_calls", "Script calls held by workers now, by tenant.", labels=["tenant"]
        )
        for tenant, count in sorted(stats.inflight_by_tenant.items()):
            held.add_metric([tenant], count)
        yield held
        yield GaugeMetricFamily(
            "rhaipool_worker_memory_bytes",
            "Resident memory of all workers.",
            value=sum(w.rss for w in pool.workers()),
        )
        yield CounterMetricFamily(
            "rhaipool_pool_calls_failed", "Pool calls that failed.", value=stats.calls_failed
        )
        yield from _egress_families(getattr(self._service, "egress", None))
        yield from _rate_limit_families(self._service.rate_limit_waits())


def _egress_families(egress: Any) -> Iterator[Any]:
    """Egress's own counters: requests by provider and status class, refusals, what it holds now."""
    if egress is None:
        return
    requests = CounterMetricFamily(
        "rhaipool_egress_requests",
        "HTTP requests provider scripts made, by provider and status class (error: no answer).",
        labels=["provider", "status"],
    )
    for (provider, status), count in sorted(egress.responses.items()):
        requests.add_metric([provider, status], count)
    yield requests
    refusals = CounterMetricFamily(
        "rhaipool_egress_refusals",
        "Egress requests or bodies refused for want of room, by the budget or quota that was full.",
        labels=["reason"],
    )
    for reason, count in sorted(egress.budgets.refusals.items()):
        refusals.add_metric([reason], count)
    yield refusals
    held = egress.budgets.in_flight()
    yield GaugeMetricFamily(
        "rhaipool_egress_inflight_requests", "Egress requests running now.", value=held["requests"]
    )
    budget = GaugeMetricFamily(
        "rhaipool_egress_held_bytes", "Response bytes egress holds now, by budget.", labels=["budget"]
    )
    for name in ("response_bytes", "stream_bytes"):
        budget.add_metric([name.removesuffix("_bytes")], held[name])
    yield budget


def _rate_limit_families(waits: list[tuple[str, str, str, int, float]]) -> Iterator[Any]:
    """Rate-limit waits by tenant, provider and cause (``window``: RPM/TPM; ``429``: the API said so)."""
    labels = ["tenant", "provider", "cause"]
    count = CounterMetricFamily(
        "rhaipool_rate_limit_waits", "Provider requests delayed by a rate limit.", labels=labels
    )
    seconds = CounterMetricFamily(
        "rhaipool_rate_limit_wait_seconds",
        "Seconds provider requests waited for a rate limit.",
        labels=labels,
    )
    for tenant, provider, cause, n, waited in waits:
        count.add_metric([tenant, provider, cause], n)
        seconds.add_metric([tenant, provider, cause], waited)
    yield count
    yield seconds


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
            registry=self.registry, buckets=_SECONDS,
        )  # fmt: skip
        self.queue_wait = Histogram(
            "rhaipool_queue_wait_seconds",
            "Time a script call waited in the pool for a worker, by tenant and script kind.",
            ["tenant", "kind"], registry=self.registry, buckets=_SECONDS,
        )  # fmt: skip
        self.execution = Histogram(
            "rhaipool_script_execution_seconds",
            "Time a script call ran in its worker, by tenant and script kind.",
            ["tenant", "kind"], registry=self.registry, buckets=_SECONDS,
        )  # fmt: skip
        self.inflight = Gauge(
            "rhaipool_inflight_calls",
            "API calls being answered, by tenant.",
            ["tenant"],
            registry=self.registry,
        )
        self.refusals = Counter(
            "rhaipool_quota_refusals",
            "Script calls refused before running, by tenant and reason: the quota's name, "
            "quarantined, or overloaded (a full or timed-out queue).",
            ["tenant", "reason"], registry=self.registry,
        )  # fmt: skip
        self.registry.register(_PoolCollector(service))
        self._children: dict[tuple[int, tuple[str, ...]], Any] = {}

    def child(self, metric: Any, *labels: str) -> Any:
        """``metric.labels(*labels)``, remembered: ``labels()`` takes a lock and checks every value
        (microseconds on every call). As bounded as the labels themselves; children are never removed."""
        key = (id(metric), labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found

    def observe(self, kind: str, tenant: str, status: int, seconds: float) -> None:
        """Count one finished API call."""
        outcome = "ok" if status < 400 else "client_error" if status < 500 else "error"
        self.child(self.calls, kind, tenant, outcome).inc()
        self.child(self.duration, kind).observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)
