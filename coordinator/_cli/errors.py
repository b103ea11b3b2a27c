"""The command line's own exceptions (everything else it reports comes from the library's trees)::

RhaipoolError (proto.errors)
├── ScenarioError          a scenario file is not valid; the message names the step and the field
├── RemoteLoadError        a scenario's script could not be stored or opened as a region on the service
└── TenantStateError       ``tenants add`` of a tenant that exists, ``tenants rotate`` of one that does not
"""

from __future__ import annotations

from proto.errors import RhaipoolError

__all__ = ["RemoteLoadError", "ScenarioError", "TenantStateError"]


class ScenarioError(RhaipoolError):
    """The scenario file is not valid; the message names the step and the field."""


class RemoteLoadError(RhaipoolError):
    """The scenario's script could not be read, stored or opened as a region on the service."""


class TenantStateError(RhaipoolError):
    """``tenants add`` found the tenant already there, or ``tenants rotate`` found no such tenant."""

    def __init__(self, tenant: str, message: str) -> None:
        super().__init__(message)
        self.tenant = tenant
