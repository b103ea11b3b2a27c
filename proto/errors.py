"""The root of every exception rhaipool raises.

    RhaipoolError
    ├── ProtocolError            (proto: malformed or unexpected wire data)
    └── ...                      (coordinator: call, pool and egress families)

It lives in ``proto`` -- the lowest layer -- so that ``worker`` and ``coordinator``
can both build on it without importing each other.
"""

from __future__ import annotations

__all__ = ["RhaipoolError"]


class RhaipoolError(Exception):
    """Base class of every error rhaipool raises on purpose."""
