"""The egress family, and what a failed request looks like to a script.

Every class here descends from ``EgressError``, the family's root (the README draws the tree):
the policy refusing a request (``EgressDenied``), a host function's failure as the script sees it
(``HostError``: ``.value`` is exactly the map the script's ``catch`` sees; ``EgressCapacityError``
and its budget and quota subclasses when egress had no room), and the failures egress raises itself
rather than the HTTP library (``TransportFailure`` and its subclasses, ``DnsFailure``,
``BodyDecodeError``, ``NoAllowedAddress``). How each failure reaches a script:
docs/scripts/errors.md#failure-labels.

The transport's (aiohttp's) exceptions are translated here and nowhere else (STYLE practice 2).
Their messages are worded as egress has always worded them (it ran on httpx until the transport
moved to aiohttp for CPU per request), so a script, a log search or an alert written against them
keeps matching.
"""

from __future__ import annotations

import asyncio
import http
import re
import socket
import ssl
from typing import Any, ClassVar

import aiohttp

from proto.errors import RhaipoolError

__all__ = [
    "MAX_ERROR_BODY_CHARS",
    "TRANSPORT_ERRORS",
    "BodyIncomplete",
    "DnsFailure",
    "EgressBudgetExhausted",
    "EgressCapacityError",
    "EgressConfigError",
    "EgressDenied",
    "EgressError",
    "EgressQuotaExceeded",
    "HostError",
    "InvalidRequest",
    "ResponseBudgetExhausted",
    "SecretMisuse",
    "StreamBudgetExhausted",
    "TenantRequestsExceeded",
    "TenantResponseBytesExceeded",
    "TooManyRedirects",
    "TransportFailure",
    "denied_error",
    "is_retryable",
    "reason_phrase",
    "retry_after_secs",
    "status_error",
    "transport_error",
]

MAX_ERROR_BODY_CHARS = 4096


class EgressError(RhaipoolError):
    """The root of the egress family: every error of a request a script asked for, or of its policy."""


class EgressConfigError(EgressError, ValueError):
    """An operator's egress table (``[serve.egress]``) is invalid; the message names the key."""


class EgressDenied(EgressError):
    """The policy refuses this request; nothing was sent."""


class SecretMisuse(EgressDenied):
    """A request carries a secret's placeholder where no secret may go; nothing was sent."""


class HostError(EgressError):
    """A host function failed; ``value`` is the map thrown into the script, exactly the reference's keys.

    ``failure_kind`` is what the coordinator worked out about the failure (one of the ten labels), kept
    out of ``value`` so scripts see the same map as on the reference, and logged by the host handler.
    """

    def __init__(self, value: dict[str, Any], failure_kind: str | None = None) -> None:
        super().__init__(str(value.get("message", "")))
        self.value = value
        self.failure_kind = failure_kind
        self.server_text: str | None = None
        """The body of a 429 (not in ``value``: scripts see the reference's map); for error messages."""


class EgressCapacityError(HostError):
    """Egress had no room for this request or body; transient for the script (``transport``)."""

    limit: ClassVar[str] = ""

    def __init__(self, message: str, *, tenant: str) -> None:
        super().__init__({"kind": "transport", "message": message, "transient": True})
        self.tenant = tenant


class EgressBudgetExhausted(EgressCapacityError):
    """A coordinator-wide budget is full (all tenants together)."""


class ResponseBudgetExhausted(EgressBudgetExhausted):
    """The global budget of response bytes being read is full."""

    limit = "response_bytes"


class StreamBudgetExhausted(EgressBudgetExhausted):
    """The global budget of stream bytes not yet handed over is full."""

    limit = "stream_bytes"


class EgressQuotaExceeded(EgressCapacityError):
    """One tenant's quota is full; other tenants are unaffected."""


class TenantRequestsExceeded(EgressQuotaExceeded):
    """The tenant already has its quota of egress requests in flight."""

    limit = "tenant_requests"


class TenantResponseBytesExceeded(EgressQuotaExceeded):
    """The tenant already holds its quota of response bytes in flight."""

    limit = "tenant_response_bytes"


class TransportFailure(EgressError):
    """A request egress itself gave up on; ``str`` is the message the script sees."""


class BodyIncomplete(TransportFailure):
    """The peer closed the connection before the whole body arrived."""


class TooManyRedirects(TransportFailure):
    """More same-origin redirect hops than allowed."""


class InvalidRequest(TransportFailure):
    """A URL or header the transport cannot send."""


class DnsFailure(EgressError, OSError):
    """The host name did not resolve (an OSError so the connector reports it as a DNS error)."""


class BodyDecodeError(EgressError):
    """The body claimed a content coding it is not encoded in."""


class NoAllowedAddress(EgressError):
    """The resolver found only addresses the policy refuses (turned into EgressDenied by the caller)."""

    def __init__(self, host: str, address: str) -> None:
        super().__init__(host, address)
        self.host, self.address = host, address


#: Where Python's phrase differs from the reference's (Rust ``http`` crate ``canonical_reason``), or
#: changes between Python versions (3.13 renamed 413 and 422).
_CANONICAL_REASONS = {
    413: "Payload Too Large",
    414: "URI Too Long",
    416: "Range Not Satisfiable",
    418: "I'm a teapot",
    422: "Unprocessable Entity",
}


def reason_phrase(status: int) -> str:
    """The canonical reason phrase (what the reference prints), whatever the server sent."""
    if status in _CANONICAL_REASONS:
        return _CANONICAL_REASONS[status]
    try:
        return http.HTTPStatus(status).phrase
    except ValueError:
        return ""


def retry_after_secs(header: str | None) -> int | None:
    """Retry-After as an unsigned integer of seconds (ASCII digits, as Rust's ``u64`` parses), else None.

    ``str.isdigit`` alone would accept ``"²"`` and then crash ``int()``; dates and fractions are not parsed.
    """
    if header is None:
        return None
    text = header.strip()
    digits = text.removeprefix("+")
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    value = int(digits)
    return value if value < 1 << 64 else None


def status_error(status: int, body: str, retry_after: str | None) -> HostError:
    """429 → rate_limited (Retry-After as integer seconds only); other non-2xx → api."""
    if status == 429:
        value: dict[str, Any] = {"kind": "rate_limited", "message": "rate limit exceeded"}
        seconds = retry_after_secs(retry_after)
        if seconds is not None:
            value["retry_after"] = seconds
        limited = HostError(value)
        limited.server_text = body[:MAX_ERROR_BODY_CHARS]
        return limited
    if len(body) > MAX_ERROR_BODY_CHARS:
        body = body[:MAX_ERROR_BODY_CHARS] + "…"
    value = {"kind": "api", "message": f"HTTP {status} {reason_phrase(status)}: {body}"}
    label = None
    if status >= 500:
        label = "server-error"
    elif status == 404:
        label = "not-found"
    elif status in (400, 413, 415, 422):
        label = "bad-request"
    return HostError(value, label)


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


def _causes(exc: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    cur: BaseException | None = exc
    while cur is not None and cur not in out:
        out.append(cur)
        if isinstance(cur, aiohttp.ClientConnectorError):
            out.append(cur.os_error)
        cur = cur.__cause__ or cur.__context__
    return out


def _text(exc: BaseException) -> str:
    """The message: the words egress used on httpx for the same failure, where they differ."""
    if isinstance(exc, TransportFailure):
        return str(exc)
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return str(exc.certificate_error)
    if isinstance(exc, aiohttp.ClientConnectorError):
        cause = exc.os_error
        if isinstance(cause, (DnsFailure, ssl.SSLError)):
            return _chain(cause)
        return f"All connection attempts failed: {cause}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "Server disconnected without sending a response."
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return "connect timed out: no connection within the connect timeout"
    if isinstance(exc, aiohttp.ClientResponseError):  # unparseable answer (we never raise_for_status)
        line = _BAD_STATUS_LINE.match(exc.message)
        return f"illegal status line: bytearray({line.group(1)})" if line else " ".join(exc.message.split())
    return _chain(exc)


#: aiohttp's parser quotes the line it could not read: ``Bad status line:\n ...\n\n  b'...'\n``.
_BAD_STATUS_LINE = re.compile(r"Bad status line:.*?\n\n  (b'.*'|b\".*\")\n", re.DOTALL)

_DROPPED = (
    aiohttp.ServerDisconnectedError,
    aiohttp.ClientPayloadError,
    aiohttp.ClientResponseError,
    aiohttp.ClientOSError,
    BodyIncomplete,
    ConnectionError,
)


def _failure_kind(exc: BaseException, text: str) -> str:
    causes = _causes(exc)
    lowered = text.lower()
    if any(isinstance(c, (TimeoutError, asyncio.TimeoutError)) for c in causes):
        return "timeout"
    if any(isinstance(c, (socket.gaierror, DnsFailure)) for c in causes) or "dns error" in lowered:
        return "dns-failure"
    if any(isinstance(c, ConnectionRefusedError) for c in causes) or "refused" in lowered:
        return "connection-refused"
    if any(isinstance(c, ssl.SSLError) for c in causes) or "certificate" in lowered:
        return "tls-failure"
    if any(isinstance(c, _DROPPED) for c in causes) and not isinstance(exc, aiohttp.ClientConnectorError):
        return "connection-dropped"
    return "transport"


def transport_error(exc: BaseException, timeout: float | None = None) -> HostError:
    """A request that got no complete answer: ``kind: "transport"`` plus a failure_kind label."""
    if isinstance(exc, TimeoutError) and timeout is not None and not isinstance(exc, aiohttp.ClientError):
        text = f"operation timed out: no complete answer within {timeout:g}s"
    else:
        text = _text(exc)
    return HostError({"kind": "transport", "message": text}, _failure_kind(exc, text))


def is_retryable(exc: BaseException) -> bool:
    """A unary request whose connection broke (docs/scripts/host-functions.md#transport: reset / closed /
    broken pipe / eof / timed out) is tried again; one that never connected (refused, DNS, TLS) or was refused
    by policy is not."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return False
    return isinstance(exc, (*_DROPPED, aiohttp.ClientConnectionError, TimeoutError))


#: Every exception the transport may raise for a request that got no complete answer.
TRANSPORT_ERRORS = (aiohttp.ClientError, TransportFailure, BodyDecodeError, TimeoutError, OSError)
