"""The command table: one byte per message kind, who may send it, and its frame count.

``proto/PROTOCOL.md`` has the same table; ``tests/proto/test_protocol_doc.py``
keeps the two equal.
"""

from __future__ import annotations

import enum
from typing import Final

__all__ = ["COMMAND_FRAMES", "FROM_COORDINATOR", "FROM_WORKER", "Command"]


class Command(enum.IntEnum):
    """One-byte command codes (byte 4 of every frame)."""

    READY = 0x01
    HEARTBEAT = 0x02
    GOODBYE = 0x03
    SHUTDOWN = 0x04
    CALL = 0x10
    RESULT = 0x11
    ERROR = 0x12
    CHUNK = 0x13
    CANCEL = 0x14
    CREDIT = 0x15
    HOST_CALL = 0x20
    HOST_REPLY = 0x21
    HOST_CHUNK = 0x22


COMMAND_FRAMES: Final = 1
"""Every command is exactly one frame: signature, version, command byte, msgpack body."""

FROM_WORKER: Final = frozenset(
    {
        Command.READY,
        Command.HEARTBEAT,
        Command.GOODBYE,
        Command.RESULT,
        Command.ERROR,
        Command.CHUNK,
        Command.CREDIT,
        Command.HOST_CALL,
    }
)
"""Commands a worker may send; anything else from a worker is a protocol violation."""

FROM_COORDINATOR: Final = frozenset(
    {
        Command.HEARTBEAT,
        Command.SHUTDOWN,
        Command.CALL,
        Command.CANCEL,
        Command.CREDIT,
        Command.HOST_REPLY,
        Command.HOST_CHUNK,
    }
)
"""Commands the coordinator may send."""
