"""A provider failure answered by ``rhaipool serve``, presented as the local commands present one.

The service answers ``{"error": {"class", "message", "transient", "reason"?, ...}}``; the label, the
HTTP status, the server's own message and the remedy are worked out here from those words (the
service's ``message`` is the provider error's, so it carries ``HTTP 401 Unauthorized: ...`` or the
transport text), and any of them the service sends itself wins. Attempts are shown when the service
reports them.
"""

from __future__ import annotations

from typing import Any

from coordinator._cli.provider_present import facts_from_host_error, plain_transport
from coordinator.providers.failures import FAILURE_KINDS, REASON_REMEDIES

__all__ = ["remote_failure_fields"]

_TRANSPORT_WORDS = (
    ("timed out", "timeout"),
    ("name or service not known", "dns-failure"),
    ("temporary failure in name resolution", "dns-failure"),
    ("refused", "connection-refused"),
    ("errno 111", "connection-refused"),
    ("connect call failed", "connection-refused"),
    ("certificate", "tls-failure"),
    ("ssl", "tls-failure"),
    ("closed", "connection-dropped"),
    ("reset", "connection-dropped"),
)


def _status_label(status: int | None) -> str | None:
    if status is None:
        return None
    if status == 429:
        return "rate-limited"
    if status >= 500:
        return "server-error"
    if status == 404:
        return "not-found"
    return "bad-request" if status in (400, 413, 415, 422) else None


def _transport_label(message: str) -> str | None:
    lowered = message.lower()
    return next((label for words, label in _TRANSPORT_WORDS if words in lowered), None)


def remote_failure_fields(error: dict[str, Any], host: str | None) -> dict[str, Any]:
    """The local ``--json`` error body (class, message, transient, failure_kind, status, ...) of ``error``."""
    fields = dict(error)
    cls = str(fields.get("class", "Other"))
    message = str(fields.get("message", ""))
    kind = "rate_limited" if cls == "RateLimitExceeded" else ""
    facts = facts_from_host_error({"message": message, "kind": kind}, None, None)
    status = fields.get("status", facts.status)
    label = fields.get("failure_kind") or fields.get("reason") or _status_label(status)
    if label is None and cls == "RequestFailed" and status is None:
        label = _transport_label(message)
        if label is not None:
            fields["message"] = plain_transport(label, message, host)
    fields.update(
        failure_kind=label,
        status=status,
        server_message=fields.get("server_message", facts.server_message),
        remedy=fields.get("remedy") or FAILURE_KINDS.get(label or "") or REASON_REMEDIES.get(label or ""),
    )
    return {k: v for k, v in fields.items() if v is not None}
