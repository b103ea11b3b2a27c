"""The command line's own exceptions (everything else it reports comes from the library's trees)::

RhaipoolError (proto.errors)
├── ScenarioError          a scenario file is not valid; the message names the step and the field
└── RemoteLoadError        a scenario's script could not be stored or opened as a region on the service
"""

from __future__ import annotations

from proto.errors import RhaipoolError

__all__ = ["RemoteLoadError", "ScenarioError"]


class ScenarioError(RhaipoolError):
    """The scenario file is not valid; the message names the step and the field."""


class RemoteLoadError(RhaipoolError):
    """The scenario's script could not be read, stored or opened as a region on the service."""
