"""The nodes package's exceptions::

RhaipoolError (proto.errors)
└── KeyFileError           a key operation that cannot be done
"""

from __future__ import annotations

from proto.errors import RhaipoolError

__all__ = ["KeyFileError"]


class KeyFileError(RhaipoolError):
    """A key operation that cannot be done (bad name, key exists, key missing, unreadable file)."""
