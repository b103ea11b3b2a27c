"""What a failed request looks like to a script: the thrown maps of SPEC §3.16, built in one place.

``HostError.value`` is exactly the map the script's ``catch`` sees; httpx exceptions are translated
here and nowhere else (STYLE practice 2).
"""

from __future__ import annotations

import http
from typing import Any

import httpx

from coordinator.egress.policy import EgressDenied
from proto.errors import RhaipoolError

__all__ = [
    "MAX_ERROR_BODY_CHARS",
    "HostError",
    "denied_error",
    "reason_phrase",
    "status_error",
    "transport_error",
]

MAX_ERROR_BODY_CHARS = 4096


class HostError(RhaipoolError):
    """A host function failed; ``value`` is the map thrown into the script."""

    def __init__(self, value: dict[str, Any]) -> None:
        super().__init__(str(value.get("message", "")))
        self.value = value


def reason_phrase(status: int) -> str:
    """The canonical reason phrase (what the reference prints), whatever the server sent."""
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def status_error(status: int, body: str, retry_after: str | None) -> HostError:
    """429 → rate_limited (Retry-After as integer seconds only); other non-2xx → api."""
    if status == 429:
        value: dict[str, Any] = {"kind": "rate_limited", "message": "rate limit exceeded"}
        if retry_after is not None and retry_after.strip().isdigit():
            value["retry_after"] = int(retry_after.strip())
        return HostError(value)
    if len(body) > MAX_ERROR_BODY_CHARS:
        body = body[:MAX_ERROR_BODY_CHARS] + "…"
    value = {"kind": "api", "message": f"HTTP {status} {reason_phrase(status)}: {body}"}
    if status >= 500:
        value["failure_kind"] = "server-error"
    elif status == 404:
        value["failure_kind"] = "not-found"
    elif status in (400, 413, 415, 422):
        value["failure_kind"] = "bad-request"
    return HostError(value)


def denied_error(exc: EgressDenied) -> HostError:
    """A refused request: a kind of its own, so it classifies as a permanent error."""
    return HostError({"kind": "egress_denied", "message": str(exc)})


def _chain(exc: BaseException) -> str:
    parts, seen = [], set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        text = str(cur) or type(cur).__name__
        if text not in parts:
            parts.append(text)
        cur = cur.__cause__ or cur.__context__
    return ": ".join(parts)


def _failure_kind(exc: BaseException, text: str) -> str:
    lowered = text.lower()
    if isinstance(exc, (httpx.TimeoutException, TimeoutError)):
        return "timeout"
    if "name or service not known" in lowered or "dns error" in lowered or "nodename nor servname" in lowered:
        return "dns-failure"
    if "refused" in lowered:
        return "connection-refused"
    if "ssl" in lowered or "certificate" in lowered or "tls" in lowered:
        return "tls-failure"
    if isinstance(exc, (httpx.ReadError, httpx.WriteError, httpx.RemoteProtocolError)):
        return "connection-dropped"
    return "transport"


def transport_error(exc: BaseException, timeout: float | None = None) -> HostError:
    """A request that got no complete answer: ``kind: "transport"`` plus a failure_kind label."""
    if isinstance(exc, TimeoutError) and timeout is not None:
        text = f"operation timed out: no complete answer within {timeout:g}s"
    else:
        text = _chain(exc)
    return HostError({"kind": "transport", "message": text, "failure_kind": _failure_kind(exc, text)})
