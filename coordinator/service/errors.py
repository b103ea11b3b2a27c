"""The service's exceptions, one module so the package's part of the tree reads in one place::

    RhaipoolError (proto.errors)
    ├── ServiceConfigError     the service config file cannot be used (also a ``ValueError``)
    ├── HTTPError              a route answers with this JSON error instead of its result
    └── RegionExists           a region of that name is already open for the tenant

The client's side of a failed request is ``coordinator.errors.ServiceError``.
"""

from __future__ import annotations

from typing import Any

from starlette.responses import JSONResponse, Response

from proto.errors import RhaipoolError

__all__ = ["HTTPError", "RegionExists", "ServiceConfigError"]


class ServiceConfigError(RhaipoolError, ValueError):
    """The config file cannot be used; the message is one line naming the key."""


class HTTPError(RhaipoolError):
    """A response to send instead of the route's result."""

    def __init__(self, status: int, error: Any, headers: dict[str, str] | None = None) -> None:
        super().__init__(error)
        self.status, self.error, self.headers = status, error, headers

    def response(self) -> Response:
        """The JSON response."""
        return JSONResponse({"error": self.error}, self.status, headers=self.headers)


class RegionExists(RhaipoolError):
    """A region of that name is already open for the tenant."""
