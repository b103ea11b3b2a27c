"""The service's exceptions, one module so the package's part of the tree reads in one place::

    RhaipoolError (proto.errors)
    ├── ServiceConfigError     the service config file cannot be used (also a ``ValueError``)
    │   └── SecretsUnavailable a sealed provider table cannot be opened, or a secret cannot be sealed
    ├── HTTPError              a route answers with this JSON error instead of its result
    │   ├── StorageFailed      a change could not be committed (507 disk full, 503 otherwise); nothing changed
    │   ├── LimitReached       a tenant's service quota refused the request (429, or 413 for a size)
    │   └── InvalidName        a script, region or provider name outside the one rule (400)
    └── RegionExists           a region of that name is already open for the tenant

The client's side of a failed request is ``coordinator.errors.ServiceError``.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response

from proto.errors import RhaipoolError

__all__ = [
    "HTTPError",
    "InvalidName",
    "LimitReached",
    "RegionExists",
    "SecretsUnavailable",
    "ServiceConfigError",
    "StorageFailed",
]


class ServiceConfigError(RhaipoolError, ValueError):
    """The config file cannot be used; the message is one line naming the key."""


class SecretsUnavailable(ServiceConfigError):
    """A sealed table cannot be opened (no key, or none of the keys that sealed it), or a table with
    secret values cannot be stored because no key is configured."""


class HTTPError(RhaipoolError):
    """A response to send instead of the route's result."""

    def __init__(self, status: int, error: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.headers = status, error, headers

    def response(self) -> Response:
        """The JSON response."""
        return JSONResponse({"error": self.error}, self.status, headers=self.headers)


class StorageFailed(HTTPError):
    """The database refused a commit (disk full: 507; I/O error, locked: 503); nothing was changed."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(status, message, {"Retry-After": "5"} if status == 503 else None)


class LimitReached(HTTPError):
    """A tenant's service quota (``quota``, its serve.toml key) refused the request; nothing changed.

    429 with ``Retry-After`` when waiting can help (streams, connections, regions being closed), 413
    when the request itself is too big for the quota.
    """

    def __init__(self, quota: str, message: str, *, status: int = 429) -> None:
        headers = {"Retry-After": "1"} if status == 429 else None
        super().__init__(status, f"{message} (quota {quota})", headers)
        self.quota = quota


class InvalidName(HTTPError, ValueError):
    """A name outside the rule: a 400 when a route raises it, a validation error inside a schema."""

    def __init__(self, message: str) -> None:
        super().__init__(400, message)


class RegionExists(RhaipoolError):
    """A region of that name is already open for the tenant."""
