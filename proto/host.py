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

__all__ = ["BROKERED", "STREAMING_HOST_CALLS", "HostCall", "HostChunk", "HostReply"]

BROKERED: Final[Mapping[str, Mapping[str, tuple[int, ...]]]] = {
    "region": {},
    "provider": {
        "http_get": (1, 2),
        "http_post": (2, 3),
        "stream_request": (4,),
        "env_var": (1,),
    },
}
"""Per script kind: brokered host function name -> the arities the script may call it with.

For ``stream_request`` the last script argument (the callback) stays in the worker;
the HOST_CALL carries the first three.
"""

STREAMING_HOST_CALLS: Final = frozenset({"stream_request"})
"""Brokered names whose reply is preceded by HOST_CHUNK payloads."""


def _hid(body: Mapping[str, Any]) -> int:
    """Host-call ids count from 1: ``hid`` 0 is the call's own output stream in CREDIT."""
    hid = s.req_id(body, "hid")
    if hid == 0:
        raise MalformedMessage("field 'hid' must be >= 1")
    return hid


def _check_name(name: str) -> str:
    if name not in BROKERED["provider"]:
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
