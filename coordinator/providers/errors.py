"""The provider family: every exception of the provider runtime, under ``ProviderFamilyError``.

Configuration (``ProviderConfigError``), loading (``ProviderLoadError``, ``ProviderNotFound``), the
caller's input (``InvalidProviderRequest``, ``Unconvertible``, both also ``ValueError``), and a
failed provider call (``ProviderError``, whose ``transient`` drives retries, and its classes: the
reference's ``RateLimitExceeded``, ``RequestFailed``, ``ApiError``, ``Unavailable``,
``InvalidResponse``, ``TokenLimitExceeded`` and ``UnclassifiedProviderError``). The README draws the
tree.

``ProviderError.class_name`` is the class a caller sees in ``{"class", "message", "transient"}``
(docs/scripts/errors.md#provider-error-classes): the reference's names, so
``UnclassifiedProviderError`` still reports ``"Other"``. How a thrown value maps onto these classes
is ``coordinator.providers.failures``.
"""

from __future__ import annotations

from typing import Any, ClassVar

from proto.errors import RhaipoolError

__all__ = [
    "ApiError",
    "InvalidProviderRequest",
    "InvalidResponse",
    "ProviderCallTimeout",
    "ProviderConfigError",
    "ProviderError",
    "ProviderFamilyError",
    "ProviderLoadError",
    "ProviderNotFound",
    "RateLimitExceeded",
    "RequestFailed",
    "RerunDiverged",
    "TokenLimitExceeded",
    "Unavailable",
    "UnclassifiedProviderError",
    "Unconvertible",
]


class ProviderFamilyError(RhaipoolError):
    """The root of the provider family: a provider could not be configured, loaded, asked or called."""


class ProviderConfigError(ProviderFamilyError):
    """The configuration file is unreadable or a provider table is invalid."""


class ProviderLoadError(ProviderFamilyError):
    """The provider exists but could not be loaded; ``str()`` is the reference's message."""


class ProviderNotFound(ProviderLoadError):
    """No script of that name (or its path was refused)."""


class InvalidProviderRequest(ProviderFamilyError, ValueError):
    """The caller's request does not have the documented shape (still a ``ValueError``)."""


class Unconvertible(ProviderFamilyError, ValueError):
    """A value with no JSON form (function pointer, custom type...) (still a ``ValueError``)."""


class ProviderError(ProviderFamilyError):
    """A provider call failed; ``transient`` says whether the retry loop may try again."""

    class_name: ClassVar[str] = "Other"
    default_transient: ClassVar[bool] = False
    script_blamed: bool = False
    """The pool blamed the call's own script (crash, budget, deadline): never retried."""

    def __init__(
        self,
        message: str,
        *,
        transient: bool | None = None,
        capacity: bool = False,
        reason: str | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.transient = self.default_transient if transient is None else transient
        self.capacity = capacity
        self.reason = reason
        self.retry_after = retry_after

    def to_dict(self) -> dict[str, Any]:
        """The ``{"class", "message", "transient"}`` shape (``rhaipool infer --json``;
        docs/scripts/errors.md#provider-error-classes)."""
        out: dict[str, Any] = {"class": self.class_name, "message": self.message, "transient": self.transient}
        if self.reason is not None:
            out["reason"] = self.reason
        return out


class RateLimitExceeded(ProviderError):
    """The provider answered 429 (or the script said ``kind: "rate_limited"``)."""

    class_name = "RateLimitExceeded"
    default_transient = True


class RequestFailed(ProviderError):
    """Transport or server trouble; retried, and after the last attempt counted as unreachable."""

    class_name = "RequestFailed"
    default_transient = True


class ProviderCallTimeout(RequestFailed):
    """A provider call ran into its wall-clock cap (``ProvidersConfig.call_timeout_secs``); transient."""


class ApiError(ProviderError):
    """The API refused the request; transient only for capacity and server-side texts."""

    class_name = "ApiError"


class Unavailable(ProviderError):
    """Credits exhausted, key refused or access forbidden: fail over, do not retry."""

    class_name = "Unavailable"


class InvalidResponse(ProviderError):
    """The script's answer has the wrong shape."""

    class_name = "InvalidResponse"
    unconvertible = False
    """The script returned a value with no JSON form (rather than throwing ``invalid_response``)."""


class TokenLimitExceeded(ProviderError):
    """The request would not fit the model's window; it was never sent."""

    class_name = "TokenLimitExceeded"


class UnclassifiedProviderError(ProviderError):
    """Everything else: plain throws, Rhai runtime errors, exceeded sandbox limits (class ``Other``)."""

    class_name = "Other"


class RerunDiverged(UnclassifiedProviderError):
    """A re-run after a worker death asked for a request other than the one its first run sent.

    Nothing was sent: sending it would have sent the call's request twice. The script is not
    deterministic (e.g. a timestamp or random id in a request body); permanent, never retried.
    """
