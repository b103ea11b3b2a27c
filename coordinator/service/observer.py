"""What the service does as each pool call ends (``Pool.observe``): metrics, and the script's output logged.

A script's ``print``/``debug`` lines are the script author's text, so they never reach the log raw:
at most :data:`MAX_LINES` lines of :data:`MAX_LINE_CHARS` characters (:data:`MAX_TOTAL_CHARS` in all),
every non-printable character escaped, as one JSON record tagged with the tenant, the script's name, the
pool's call id and the HTTP request it served. Only ``--log-json`` turns that log on.

The request is known through :data:`current_request`, which the gate sets for each HTTP call: the pool
runs its observers in the context of the task that submitted the call.
"""

from __future__ import annotations

import contextvars
import logging
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, Final

from coordinator.errors import Overloaded, Quarantined, QuotaExceeded
from coordinator.service.logs import printable

if TYPE_CHECKING:
    from coordinator._core.calls import CallEnded
    from coordinator.service.metrics import Metrics

__all__ = [
    "MAX_LINES",
    "MAX_LINE_CHARS",
    "MAX_TOTAL_CHARS",
    "CallObserver",
    "current_request",
    "printable",
    "refusal_reason",
]

MAX_LINES: Final = 20
MAX_LINE_CHARS: Final = 500
MAX_TOTAL_CHARS: Final = 4096

current_request: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "rhaipool_service_request", default=None
)
"""The facts of the HTTP call being answered (its ``request`` number, its tenant), set by the gate."""

output_log = logging.getLogger("rhaipool.service.scripts")


def script_label(name: str) -> str:
    """A script's name without the directory the service keeps its files in."""
    return PurePath(name).name.removesuffix(".rhai")


def capped(lines: tuple[str, ...]) -> tuple[list[str], bool]:
    """At most the caps' worth of ``lines``, escaped; whether anything was cut."""
    kept: list[str] = []
    total, cut = 0, len(lines) > MAX_LINES
    for line in lines[:MAX_LINES]:
        room = min(MAX_LINE_CHARS, MAX_TOTAL_CHARS - total)
        if room <= 0:
            return kept, True
        safe = printable(line[:room])
        if len(line) > room or len(safe) > room:
            safe, cut = safe[:room], True
        kept.append(safe)
        total += len(safe)
    return kept, cut


def refusal_reason(error: BaseException | None) -> str | None:
    """The ``reason`` label of a call refused before it ran, or None for any other outcome."""
    if isinstance(error, QuotaExceeded):
        return error.quota or type(error).__name__
    if isinstance(error, Quarantined):
        return "quarantined"
    if isinstance(error, Overloaded):
        return "overloaded"
    return None


class CallObserver:
    """Registered with ``pool.observe``: queue wait, execution time, refusals, and script output."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def __call__(self, ended: CallEnded) -> None:
        m = self.metrics
        if ended.queue_wait is not None:
            m.child(m.queue_wait, ended.tenant, ended.kind).observe(max(ended.queue_wait, 0.0))
        reason = None if ended.error is None else refusal_reason(ended.error)
        if reason is not None:
            m.refusals.labels(ended.tenant, reason).inc()
        if ended.result is None:
            return
        m.child(m.execution, ended.tenant, ended.kind).observe(ended.result.wall)
        if ended.result.output and output_log.isEnabledFor(logging.INFO):
            self._log_output(ended)

    @staticmethod
    def _log_output(ended: CallEnded) -> None:
        assert ended.result is not None
        lines, cut = capped(ended.result.output)
        request = current_request.get() or {}
        output_log.info(
            "script output",
            extra={
                "tenant": ended.tenant,
                "script": script_label(ended.script),
                "function": ended.function,
                "call_id": ended.call_id,
                "request": request.get("request"),
                "output": lines,
                "output_lines": len(ended.result.output),
                "truncated": cut,
            },
        )
