"""Brokered I/O family: HOST_CALL, HOST_REPLY, HOST_CHUNK, and the one list of brokered names.

A provider script's ``http_get`` (and friends) cannot do I/O inside the sandbox:
the worker sends HOST_CALL, blocks the script thread, and the coordinator answers
with HOST_REPLY.  ``stream_request`` additionally receives HOST_CHUNK payloads,
each acknowledged by a CREDIT with the same ``hid``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from proto import schema as s
from proto.commands import Command
from proto.errors import MalformedMessage
from proto.vocabulary import Kind

__all__ = [
    "BROKERED",
    "BROKERED_FUNCTIONS",
    "STREAMING_HOST_CALLS",
    "HostCall",
    "HostChunk",
    "HostFunction",
    "HostReply",
]


@dataclass(frozen=True, slots=True)
class HostFunction:
    """One brokered host function: its Rhai signatures as the reference registers them
    (docs/scripts/host-functions.md).

    The worker registers exactly ``signatures`` (a call with other types is Rhai's catchable "function
    not found" and never becomes a HOST_CALL); the coordinator checks a HOST_CALL's arguments against
    ``wire_signatures``, and its arity against ``arities``. A ``streaming`` function's last parameter
    (the callback) stays in the worker and its reply is preceded by HOST_CHUNK payloads.
    """

    name: str
    signatures: tuple[tuple[str, ...], ...]
    streaming: bool = False

    @property
    def arities(self) -> tuple[int, ...]:
        """The arities a script may call it with (callback included)."""
        return tuple(sorted({len(types) for types in self.signatures}))

    @property
    def wire_signatures(self) -> tuple[tuple[str, ...], ...]:
        """The Rhai types of the arguments a HOST_CALL carries (the callback dropped)."""
        return tuple(types[:-1] if self.streaming else types for types in self.signatures)


BROKERED_FUNCTIONS: Final[Mapping[Kind, Mapping[str, HostFunction]]] = {
    Kind.REGION: {},
    Kind.PROVIDER: {
        f.name: f
        for f in (
            HostFunction("http_get", (("string",), ("string", "map"))),
            HostFunction("http_post", (("string", "string"), ("string", "string", "map"))),
            HostFunction("stream_request", (("string", "string", "map", "fnptr"),), streaming=True),
            HostFunction("env_var", (("string",),)),
        )
    },
}
"""Per script kind: the brokered host functions, the one table every other list derives from."""

BROKERED: Final[Mapping[str, Mapping[str, tuple[int, ...]]]] = {
    kind: {name: f.arities for name, f in table.items()} for kind, table in BROKERED_FUNCTIONS.items()
}
"""Per script kind: brokered host function name -> the arities the script may call it with.

For ``stream_request`` the last script argument (the callback) stays in the worker;
the HOST_CALL carries the first three.
"""

STREAMING_HOST_CALLS: Final = frozenset(
    name for table in BROKERED_FUNCTIONS.values() for name, f in table.items() if f.streaming
)
"""Brokered names whose reply is preceded by HOST_CHUNK payloads."""


def _hid(body: Mapping[str, Any]) -> int:
    """Host-call ids count from 1: ``hid`` 0 is the call's own output stream in CREDIT."""
    hid = s.req_id(body, "hid")
    if hid == 0:
        raise MalformedMessage("field 'hid' must be >= 1")
    return hid


def _check_name(name: str) -> str:
    if name not in BROKERED_FUNCTIONS[Kind.PROVIDER]:
        raise MalformedMessage(f"{name!r} is not a brokered host function")
    return name


@dataclass(frozen=True, slots=True)
class HostCall:
    """W→C: call ``id`` asks the coordinator to perform host function ``name``; ``hid`` counts from 1."""

    COMMAND: ClassVar[Command] = Command.HOST_CALL
    id: int
    hid: int
    name: str
    args: list[Any]

    def to_body(self) -> dict[str, Any]:
        return {"id": self.id, "hid": self.hid, "name": self.name, "args": self.args}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> HostCall:
        return cls(
            s.req_id(body),
            _hid(body),
            _check_name(s.req_str(body, "name")),
            s.req_list(body, "args"),
        )


@dataclass(frozen=True, slots=True)
class HostReply:
    """C→W: the host call's value (``ok``) or the value to throw into the script (not ``ok``)."""

    COMMAND: ClassVar[Command] = Command.HOST_REPLY
    id: int
    hid: int
    ok: bool
    value: Any

    def to_body(self) -> dict[str, Any]:
        return {"id": self.id, "hid": self.hid, "ok": self.ok, "value": self.value}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> HostReply:
        return cls(s.req_id(body), _hid(body), s.req_bool(body, "ok"), s.any_value(body, "value"))


@dataclass(frozen=True, slots=True)
class HostChunk:
    """C→W: one payload of a streaming host call, delivered to the script's callback."""

    COMMAND: ClassVar[Command] = Command.HOST_CHUNK
    id: int
    hid: int
    seq: int
    value: Any

    def to_body(self) -> dict[str, Any]:
        return {"id": self.id, "hid": self.hid, "seq": self.seq, "value": self.value}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> HostChunk:
        return cls(s.req_id(body), _hid(body), s.req_id(body, "seq"), s.any_value(body, "value"))
