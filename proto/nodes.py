"""RHN/1: the node link — a node process ↔ the coordinator, over TCP + CurveZMQ (PROTOCOL.md §14).

Two shapes of message travel on the node's DEALER / the coordinator's node ROUTER:

* one frame: a node-control message, ``"RHN"`` + version byte + command byte + msgpack body;
* two frames: relayed worker traffic, ``[worker routing id, RHP frame]``, passed through untouched by
  the node (the coordinator decodes and validates the RHP frame as if the worker were local).

Control messages are small (a HEARTBEAT lists one RSS figure per worker); anything over
``MAX_NODE_FRAME`` is refused before it is unpacked.  ``decode_node`` raises only ``ProtocolError``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Protocol

from proto import schema as s
from proto.errors import MalformedMessage, TooLarge, UnknownCommand, VersionMismatch
from proto.values import pack, unpack

__all__ = [
    "MAX_NODE_FRAME",
    "NODE_SIGNATURE",
    "WORKER_ID_BYTES",
    "Bye",
    "Drain",
    "Hello",
    "KillWorker",
    "NodeBeat",
    "NodeCommand",
    "NodeMessage",
    "Reset",
    "Spawned",
    "Welcome",
    "WorkerExited",
    "decode_node",
    "encode_node",
]

NODE_SIGNATURE: Final = b"RHN\x01"
MAX_NODE_FRAME: Final = 256 * 1024
WORKER_ID_BYTES: Final = 8
_MAX_WORKERS: Final = 4096
_MAX_TEXT: Final = 4096


class NodeCommand(enum.IntEnum):
    HELLO = 0x01  # N→C
    WELCOME = 0x02  # C→N
    BEAT = 0x03  # both ways
    SPAWNED = 0x04  # N→C
    EXITED = 0x05  # N→C
    KILL = 0x06  # C→N
    DRAIN = 0x07  # N→C
    BYE = 0x08  # N→C
    RESET = 0x09  # C→N


def _text(body: Mapping[str, Any], key: str) -> str:
    value = s.req_str(body, key)
    if len(value) > _MAX_TEXT:
        raise MalformedMessage(f"field {key!r} longer than {_MAX_TEXT} characters")
    return value


def _worker_id(body: Mapping[str, Any], key: str = "worker") -> bytes:
    value = body.get(key)
    if type(value) is not bytes or len(value) != WORKER_ID_BYTES:
        raise MalformedMessage(f"field {key!r} must be {WORKER_ID_BYTES} bytes")
    return value


def _count(body: Mapping[str, Any], key: str, low: int = 0, high: int = _MAX_WORKERS) -> int:
    value = s.req_int(body, key)
    if not low <= value <= high:
        raise MalformedMessage(f"field {key!r} must be in [{low}, {high}]")
    return value


def _positive(body: Mapping[str, Any], key: str) -> float:
    value = s.req_float(body, key)
    if not 0 < value <= 3600:
        raise MalformedMessage(f"field {key!r} must be in (0, 3600]")
    return value


@dataclass(frozen=True, slots=True)
class Hello:
    """N→C first on every session: who the node is and how many workers it runs."""

    COMMAND: ClassVar[NodeCommand] = NodeCommand.HELLO
    name: str
    workers: int
    pid: int
    versions: list[int]
    group: str = ""
    """The node group (``rhaipool node --group``) a tenant's dedicated workers may be pinned to."""

    def to_body(self) -> dict[str, Any]:
        body = {"name": self.name, "workers": self.workers, "pid": self.pid, "versions": self.versions}
        return {**body, "group": self.group}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Hello:
        versions = s.req_list(body, "versions")
        if not versions or len(versions) > 16 or any(type(v) is not int for v in versions):
            raise MalformedMessage("field 'versions' must be a short non-empty array of int")
        group = s.opt_str(body, "group") or ""
        if len(group) > 128:
            raise MalformedMessage("field 'group' longer than 128 characters")
        return cls(_text(body, "name"), _count(body, "workers", 1), s.req_int(body, "pid"), versions, group)


@dataclass(frozen=True, slots=True)
class Welcome:
    """C→N: accepted; the liveness rule both sides apply and the arguments of every worker."""

    COMMAND: ClassVar[NodeCommand] = NodeCommand.WELCOME
    heartbeat: float
    liveness: float
    """Seconds of silence after which either side gives the other up."""
    worker_args: dict[str, int | float] = field(default_factory=dict)

    def to_body(self) -> dict[str, Any]:
        return {"heartbeat": self.heartbeat, "liveness": self.liveness, "worker_args": self.worker_args}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Welcome:
        args = s.req_dict(body, "worker_args")
        allowed = {
            "memory-bytes", "cpu-seconds", "open-files", "file-size", "heartbeat", "capacity",
            "resident-lists", "resident-bytes",
        }  # fmt: skip
        for key, value in args.items():
            if key not in allowed or type(value) not in (int, float) or value < 0:
                raise MalformedMessage(f"worker_args: {key!r} is not a known non-negative number")
        return cls(_positive(body, "heartbeat"), _positive(body, "liveness"), dict(args))


@dataclass(frozen=True, slots=True)
class NodeBeat:
    """Either way every ``heartbeat`` seconds; from a node, each worker's resident bytes."""

    COMMAND: ClassVar[NodeCommand] = NodeCommand.BEAT
    rss: dict[bytes, int] = field(default_factory=dict)

    def to_body(self) -> dict[str, Any]:
        return {"rss": [[k, v] for k, v in self.rss.items()]}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> NodeBeat:
        pairs = s.req_list(body, "rss")
        if len(pairs) > _MAX_WORKERS:
            raise MalformedMessage("field 'rss' lists too many workers")
        rss: dict[bytes, int] = {}
        for pair in pairs:
            if not isinstance(pair, list) or len(pair) != 2 or type(pair[1]) is not int:
                raise MalformedMessage("field 'rss' must hold [worker, bytes] pairs")
            rss[_worker_id({"w": pair[0]}, "w")] = pair[1]
        return cls(rss)


@dataclass(frozen=True, slots=True)
class Spawned:
    """N→C: a worker process started; its RHP traffic follows, relayed under ``worker``."""

    COMMAND: ClassVar[NodeCommand] = NodeCommand.SPAWNED
    worker: bytes
    pid: int

    def to_body(self) -> dict[str, Any]:
        return {"worker": self.worker, "pid": self.pid}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Spawned:
        return cls(_worker_id(body), s.req_int(body, "pid"))


@dataclass(frozen=True, slots=True)
class WorkerExited:
    """N→C: a worker process was reaped: its return code (negative: signal) and stderr's last line."""

    COMMAND: ClassVar[NodeCommand] = NodeCommand.EXITED
    worker: bytes
    returncode: int
    stderr: str = ""

    def to_body(self) -> dict[str, Any]:
        return {"worker": self.worker, "returncode": self.returncode, "stderr": self.stderr[-_MAX_TEXT:]}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> WorkerExited:
        return cls(_worker_id(body), s.req_int(body, "returncode"), _text(body, "stderr"))


@dataclass(frozen=True, slots=True)
class KillWorker:
    """C→N: SIGKILL this worker now (deadline, memory, shutdown grace...)."""

    COMMAND: ClassVar[NodeCommand] = NodeCommand.KILL
    worker: bytes

    def to_body(self) -> dict[str, Any]:
        return {"worker": self.worker}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> KillWorker:
        return cls(_worker_id(body))


@dataclass(frozen=True, slots=True)
class _Reasoned:
    reason: str = ""

    def to_body(self) -> dict[str, Any]:
        return {"reason": self.reason}


@dataclass(frozen=True, slots=True)
class Drain(_Reasoned):
    """N→C: place nothing new here; SHUTDOWN each worker once it holds no call."""

    COMMAND: ClassVar[NodeCommand] = NodeCommand.DRAIN

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Drain:
        return cls(_text(body, "reason"))


@dataclass(frozen=True, slots=True)
class Bye(_Reasoned):
    """N→C: the node leaves; its workers are gone."""

    COMMAND: ClassVar[NodeCommand] = NodeCommand.BYE

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Bye:
        return cls(_text(body, "reason"))


@dataclass(frozen=True, slots=True)
class Reset(_Reasoned):
    """C→N: this session is unknown or expired; start a new one (HELLO) with fresh workers."""

    COMMAND: ClassVar[NodeCommand] = NodeCommand.RESET

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Reset:
        return cls(_text(body, "reason"))


class NodeMessage(Protocol):
    COMMAND: ClassVar[NodeCommand]

    def to_body(self) -> dict[str, Any]: ...


_TYPES: Final[dict[int, Any]] = {
    int(cls.COMMAND): cls
    for cls in (Hello, Welcome, NodeBeat, Spawned, WorkerExited, KillWorker, Drain, Bye, Reset)
}


def encode_node(message: NodeMessage) -> bytes:
    """The one frame of a node-control message."""
    return NODE_SIGNATURE + bytes((int(message.COMMAND),)) + pack(message.to_body())


def decode_node(frames: Sequence[bytes]) -> Any:
    """Parse and validate one node-control message (exactly one frame); ``ProtocolError`` on any defect."""
    if len(frames) != 1:
        raise MalformedMessage(f"{len(frames)} frames, expected 1")
    frame = frames[0]
    if len(frame) > MAX_NODE_FRAME:
        raise TooLarge(f"node frame of {len(frame)} bytes exceeds {MAX_NODE_FRAME}")
    if len(frame) < 5 or frame[:4] != NODE_SIGNATURE:
        raise VersionMismatch(f"signature {bytes(frame[:4])!r} is not RHN/1")
    cls = _TYPES.get(frame[4])
    if cls is None:
        raise UnknownCommand(f"node command 0x{frame[4]:02x}")
    return cls.from_body(s.as_body(unpack(memoryview(frame)[5:])))
