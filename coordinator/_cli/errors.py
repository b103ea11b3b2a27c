"""The command line's own exceptions, outside the library's tree (everything else it reports comes
from the library's ``RhaipoolError`` families): ``CommandLineError`` is their root, and the command
that raises one catches it and reports it with its exit code.
"""

from __future__ import annotations

__all__ = ["CommandLineError", "RemoteLoadError", "ScenarioError", "TenantStateError"]


class CommandLineError(Exception):
    """The root of the command line's own errors; no library call raises one."""


class ScenarioError(CommandLineError):
    """The scenario file is not valid; the message names the step and the field."""


class RemoteLoadError(CommandLineError):
    """The scenario's script could not be read, stored or opened as a region on the service."""


class TenantStateError(CommandLineError):
    """``tenants add`` found the tenant already there, or ``tenants rotate`` found no such tenant."""

    def __init__(self, tenant: str, message: str) -> None:
        super().__init__(message)
        self.tenant = tenant
