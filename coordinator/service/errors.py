"""The service's exceptions, in the service family (``coordinator.errors.ServiceFamilyError``).

A config file that cannot be used (``ServiceConfigError``, also a ``ValueError``; ``SecretsUnavailable``
when a sealed table cannot be opened), a route's answer instead of its result (``RouteError`` and
its subclasses ``StorageFailed``, ``LimitReached``, ``InvalidName``), and a region already open
(``RegionExists``). The client's side of a failed request is ``coordinator.errors.ServiceError``, in
the same family. The README draws the tree.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response

from coordinator.errors import ServiceFamilyError

__all__ = [
    "InvalidName",
    "LimitReached",
    "RegionExists",
    "RouteError",
    "SecretsUnavailable",
    "ServiceConfigError",
    "StorageFailed",
]


class ServiceConfigError(ServiceFamilyError, ValueError):
    """The config file cannot be used; the message is one line naming the key."""


class SecretsUnavailable(ServiceConfigError):
    """A sealed table cannot be opened (no key, or none of the keys that sealed it), or a table with
    secret values cannot be stored because no key is configured."""


class RouteError(ServiceFamilyError):
    """A response to send instead of the route's result."""

    def __init__(self, status: int, error: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.headers = status, error, headers

    def response(self) -> Response:
        """The JSON response."""
        return JSONResponse({"error": self.error}, self.status, headers=self.headers)


class StorageFailed(RouteError):
    """The database refused a commit (disk full: 507; I/O error, locked: 503); nothing was changed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message, {"Retry-After": "5"} if status == 503 else None)


class LimitReached(RouteError):
    """A tenant's service quota (``quota``, its serve.toml key) refused the request; nothing changed.

    429 with ``Retry-After`` when waiting can help (streams, connections, regions being closed), 413
    when the request itself is too big for the quota.
    """

    def __init__(self, quota: str, message: str, *, status: int = 429) -> None:
        headers = {"Retry-After": "1"} if status == 429 else None
        super().__init__(status, f"{message} (quota {quota})", headers)
        self.quota = quota


class InvalidName(RouteError, ValueError):
    """A name outside the rule: a 400 when a route raises it, a validation error inside a schema."""

    def __init__(self, message: str) -> None:
        super().__init__(400, message)


class RegionExists(ServiceFamilyError):
    """A region of that name is already open for the tenant."""
