"""The command line's own exceptions (everything else it reports comes from the library's trees)::

RhaipoolError (proto.errors)
└── ScenarioError          a scenario file is not valid; the message names the step and the field
"""

from __future__ import annotations

from proto.errors import RhaipoolError

__all__ = ["ScenarioError"]


class ScenarioError(RhaipoolError):
    """The scenario file is not valid; the message names the step and the field."""
