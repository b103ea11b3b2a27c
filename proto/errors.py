"""The root of every exception rhaipool raises, and the wire's own error family.

``RhaipoolError`` is the root; ``ProtocolError`` (malformed or unexpected wire data) is the protocol
family's, with ``MalformedMessage``, ``UnknownCommand``, ``VersionMismatch`` and ``TooLarge`` under it.
The other families hang under the root from their own packages; the README draws the whole tree.

It lives in ``proto`` -- the lowest layer -- so that ``worker`` and ``coordinator``
can both build on it without importing each other.  Decoders in ``proto`` raise
nothing but ``ProtocolError`` subclasses, whatever bytes they are given.
"""

from __future__ import annotations

__all__ = [
    "MalformedMessage",
    "ProtocolError",
    "RhaipoolError",
    "TooLarge",
    "UnknownCommand",
    "VersionMismatch",
]


class RhaipoolError(Exception):
    """Base class of every error rhaipool raises on purpose."""


class ProtocolError(RhaipoolError):
    """Wire data that cannot be accepted; the message is dropped, never half-used."""


class MalformedMessage(ProtocolError):
    """Frames, msgpack or fields that do not parse or do not match the schema."""


class UnknownCommand(ProtocolError):
    """A command byte that this protocol version does not define."""


class VersionMismatch(ProtocolError):
    """The signature frame is not ``RHP`` followed by a version this peer speaks."""


class TooLarge(ProtocolError):
    """A frame, string, binary, array or map beyond the hard caps of ``proto.values``."""
