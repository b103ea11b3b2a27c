"""Provider failures: how a thrown value maps onto the error classes a caller sees
(docs/scripts/errors.md#provider-error-classes).

The classes live in ``coordinator.providers.errors`` (re-exported here; the README draws the tree).
The classification never depends on ``failure_kind``: that label only decorates the message with a
remedy sentence so a person knows what to do next.
"""

from __future__ import annotations

from typing import Any

from coordinator.providers.errors import (
    ApiError,
    InvalidResponse,
    ProviderError,
    RateLimitExceeded,
    RequestFailed,
    TokenLimitExceeded,
    Unavailable,
    UnclassifiedProviderError,
)

__all__ = [
    "FAILURE_KINDS",
    "MAX_RETRY_AFTER_SECS",
    "REASON_REMEDIES",
    "ApiError",
    "InvalidResponse",
    "ProviderError",
    "RateLimitExceeded",
    "RequestFailed",
    "TokenLimitExceeded",
    "Unavailable",
    "UnclassifiedProviderError",
    "classify_api_message",
    "classify_thrown",
    "decorate",
    "error_from_dict",
    "value_text",
]

#: The ten failure_kind labels and our remedy sentence for each (docs/scripts/errors.md#failure-labels).
FAILURE_KINDS: dict[str, str] = {
    "dns-failure": "the host name did not resolve; check base_url and this machine's DNS",
    "connection-refused": (
        "nothing accepted the connection; check the provider is running and listening on that port"
    ),
    "tls-failure": "the TLS handshake failed; check the certificate, the clock and any proxy on the way",
    "timeout": "the provider did not answer in time; raise request_timeout_secs if it is just slow",
    "connection-dropped": "the connection closed before the answer was complete; a retry often gets through",
    "transport": "the provider could not be reached; check the network path and base_url",
    "bad-request": "the provider rejected the request itself; compare the script's body with the API docs",
    "not-found": "the endpoint answered 404; check the base_url path and that the model id exists",
    "server-error": "the provider's own endpoint failed; this may pass on retry",
    "malformed-response": "the answer could not be parsed; check how the script parses the API's answer",
}

#: Remedies for the failures that are not transport labels: the ``reason`` of Unavailable, and 429.
REASON_REMEDIES: dict[str, str] = {
    "auth-failed": "the provider refused the API key; check api_key in the provider's config table "
    "(or the environment variable the script reads) and that the key is still active",
    "forbidden": "the key is valid but not allowed to do this; check the key's permissions and the model id",
    "credits-exhausted": "the account has no credit left; top it up or fail over to another provider",
    "rate-limited": "the provider is rate limiting this key; wait, lower the request rate "
    "([model_providers.NAME.rate_limit]) or raise the account's limits",
}

#: Longest wait a script provider's 429 ``retry_after`` may ask for (seconds);
#: the reference always waits 15 s.
MAX_RETRY_AFTER_SECS = 60

_CREDIT_PHRASES = (
    "credit balance is too low",
    "insufficient credits",
    "requires more credits",
    "insufficient_quota",
    "exceeded your current quota",
    "billing",
)
_TRANSIENT_API_PHRASES = (
    "429",
    "too many requests",
    "rate limit",
    "529",
    "overloaded",
    "500",
    "502",
    "503",
    "504",
    "internal server error",
    "bad gateway",
    "service unavailable",
    "gateway timeout",
)
_CAPACITY_API_PHRASES = ("429", "529", "overloaded", "rate limit", "too many requests")


_BY_NAME: dict[str, type[ProviderError]] = {
    cls.class_name: cls
    for cls in (
        RateLimitExceeded,
        RequestFailed,
        ApiError,
        Unavailable,
        InvalidResponse,
        TokenLimitExceeded,
        UnclassifiedProviderError,
    )
}


def error_from_dict(data: dict[str, Any]) -> ProviderError:
    """Rebuild an error from :meth:`ProviderError.to_dict` (used across process boundaries)."""
    cls = _BY_NAME.get(str(data.get("class")), UnclassifiedProviderError)
    return cls(str(data.get("message", "")), transient=bool(data.get("transient", False)))


def value_text(value: Any) -> str:
    """How Rhai would print a thrown non-map value (``()`` prints as nothing, as in the reference)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def decorate(message: str, failure_kind: Any) -> str:
    """Prefix ``[label]`` and append the remedy when ``failure_kind`` is one of the ten labels."""
    if not isinstance(failure_kind, str) or failure_kind not in FAILURE_KINDS or message.startswith("["):
        return message
    return f"[{failure_kind}] {message} - {FAILURE_KINDS[failure_kind]}"


def classify_api_message(message: str) -> ProviderError:
    """An ``api`` error: unavailable for 401/402/403 or credit texts, else ApiError (maybe transient)."""
    lowered = message.lower()
    if message.startswith("HTTP 402") or any(p in lowered for p in _CREDIT_PHRASES):
        return Unavailable(message, reason="credits-exhausted")
    if message.startswith("HTTP 401"):
        return Unavailable(message, reason="auth-failed")
    if message.startswith("HTTP 403"):
        return Unavailable(message, reason="forbidden")
    transient = any(p in lowered for p in _TRANSIENT_API_PHRASES)
    capacity = any(p in lowered for p in _CAPACITY_API_PHRASES)
    return ApiError(message, transient=transient, capacity=capacity)


def classify_thrown(value: Any) -> ProviderError:
    """Map a value thrown out of a provider script onto an error class
    (docs/scripts/errors.md#provider-error-classes)."""
    if not isinstance(value, dict):
        return UnclassifiedProviderError(value_text(value))
    kind = value.get("kind")
    kind = kind if isinstance(kind, str) and kind else None
    message = value.get("message")
    message = message if isinstance(message, str) and message else "provider script error"
    transient = value.get("transient") is True
    raw_message = message
    message = decorate(message, value.get("failure_kind"))
    if kind == "rate_limited":
        after = value.get("retry_after")
        wait = (
            min(after, MAX_RETRY_AFTER_SECS)
            if isinstance(after, int) and not isinstance(after, bool) and after >= 0
            else None
        )
        return RateLimitExceeded(message, capacity=True, retry_after=wait)
    if kind in ("transport", "server"):
        return RequestFailed(message)
    if kind == "api":
        err = classify_api_message(raw_message)
        err.message = message
        err.args = (message,)
        return err
    if kind == "invalid_response":
        return InvalidResponse(message)
    if transient:
        return RequestFailed(message)
    return UnclassifiedProviderError(message)
