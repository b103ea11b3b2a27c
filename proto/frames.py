"""Multipart framing: ``[signature+version, command byte, msgpack body]``, and nothing else.

Every message is checkable on its own (ZeroMQ reconnects silently, so a peer can
never assume the previous message set any context).  ``decode`` raises only
``ProtocolError`` subclasses.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final, Protocol

from proto.calls import Call, Cancel, Chunk, Credit, Error, Result
from proto.commands import COMMAND_FRAMES, Command
from proto.control import Goodbye, Heartbeat, Ready, Shutdown
from proto.errors import MalformedMessage, UnknownCommand, VersionMismatch
from proto.host import HostCall, HostChunk, HostReply
from proto.schema import as_body
from proto.values import pack, unpack

__all__ = [
    "MESSAGE_TYPES",
    "PROTOCOL_VERSION",
    "SIGNATURE",
    "SUPPORTED_VERSIONS",
    "Message",
    "decode",
    "encode",
    "signature_for",
]

PROTOCOL_VERSION: Final = 1
SUPPORTED_VERSIONS: Final = frozenset({1})
_MAGIC: Final = b"RHP"


def signature_for(version: int) -> bytes:
    """Frame 0: the three bytes ``RHP`` followed by one version byte."""
    return _MAGIC + bytes((version,))


SIGNATURE: Final = signature_for(PROTOCOL_VERSION)


class Message(Protocol):
    """What every message class in ``proto.control``, ``proto.calls`` and ``proto.host`` provides."""

    @property
    def COMMAND(self) -> Command: ...  # noqa: N802 - a class constant in the implementations

    def to_body(self) -> dict[str, Any]: ...


MESSAGE_TYPES: Final[dict[Command, Any]] = {
    cls.COMMAND: cls
    for cls in (Ready, Heartbeat, Goodbye, Shutdown, Call, Result, Error, Chunk, Cancel, Credit, HostCall, HostReply, HostChunk)
}
_COMMAND_BYTES: Final = {command: bytes((command,)) for command in Command}


def encode(message: Message) -> list[bytes]:
    """The three frames of ``message``; raises ``MalformedMessage`` if a value has no wire form."""
    return [SIGNATURE, _COMMAND_BYTES[message.COMMAND], pack(message.to_body())]


def decode(frames: Sequence[bytes]) -> Any:
    """Parse and validate one message; raise ``ProtocolError`` on any defect."""
    if len(frames) != COMMAND_FRAMES:
        raise MalformedMessage(f"{len(frames)} frames, expected {COMMAND_FRAMES}")
    signature, command_frame, body = frames
    if signature != SIGNATURE:
        if len(signature) == 4 and signature[:3] == _MAGIC:
            raise VersionMismatch(f"protocol version {signature[3]} not in {sorted(SUPPORTED_VERSIONS)}")
        raise VersionMismatch(f"signature {bytes(signature[:8])!r} is not RHP")
    if len(command_frame) != 1:
        raise MalformedMessage(f"command frame of {len(command_frame)} bytes, expected 1")
    try:
        command = Command(command_frame[0])
    except ValueError:
        raise UnknownCommand(f"command 0x{command_frame[0]:02x}") from None
    return MESSAGE_TYPES[command].from_body(as_body(unpack(body)))
