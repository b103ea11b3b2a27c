"""The wire between the coordinator and its workers: messages, framing, versions, values.

See ``proto/PROTOCOL.md`` for the normative description.  This package imports
only the standard library and msgpack.
"""

from proto.calls import ERROR_CLASSES, KINDS, OPS, Call, Cancel, Chunk, Credit, Error, Result
from proto.commands import COMMAND_FRAMES, FROM_COORDINATOR, FROM_WORKER, Command
from proto.control import Goodbye, Heartbeat, Ready, Shutdown
from proto.errors import (
    MalformedMessage,
    ProtocolError,
    RhaipoolError,
    TooLarge,
    UnknownCommand,
    VersionMismatch,
)
from proto.frames import (
    PROTOCOL_VERSION,
    SIGNATURE,
    SUPPORTED_VERSIONS,
    WireMessage,
    decode,
    encode,
    encode_call,
    signature_for,
)
from proto.host import (
    BROKERED,
    BROKERED_FUNCTIONS,
    STREAMING_HOST_CALLS,
    HostCall,
    HostChunk,
    HostFunction,
    HostReply,
)
from proto.values import MAX_BODY_BYTES, MAX_CONTAINER_LEN, pack, unpack
from proto.vocabulary import ErrorClass, Kind, Limit, Op, rhai_type_name

__all__ = [
    "BROKERED",
    "BROKERED_FUNCTIONS",
    "COMMAND_FRAMES",
    "ERROR_CLASSES",
    "FROM_COORDINATOR",
    "FROM_WORKER",
    "KINDS",
    "MAX_BODY_BYTES",
    "MAX_CONTAINER_LEN",
    "OPS",
    "PROTOCOL_VERSION",
    "SIGNATURE",
    "STREAMING_HOST_CALLS",
    "SUPPORTED_VERSIONS",
    "Call",
    "Cancel",
    "Chunk",
    "Command",
    "Credit",
    "Error",
    "ErrorClass",
    "Goodbye",
    "Heartbeat",
    "HostCall",
    "HostChunk",
    "HostFunction",
    "HostReply",
    "Kind",
    "Limit",
    "MalformedMessage",
    "Op",
    "ProtocolError",
    "Ready",
    "Result",
    "RhaipoolError",
    "Shutdown",
    "TooLarge",
    "UnknownCommand",
    "VersionMismatch",
    "WireMessage",
    "decode",
    "encode",
    "encode_call",
    "pack",
    "rhai_type_name",
    "signature_for",
    "unpack",
]
