"""Presence and liveness family: READY, HEARTBEAT, GOODBYE, SHUTDOWN."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from proto import schema as s
from proto.commands import Command
from proto.errors import MalformedMessage

__all__ = ["Goodbye", "Heartbeat", "Ready", "Shutdown"]


@dataclass(frozen=True, slots=True)
class Ready:
    """W→C once after connecting: who I am, which versions I speak, which sandbox layers hold.

    ``sandbox`` maps a layer name to ``{"active": bool, "detail": str}``; ``probe``
    carries the test-only probe results (``--probe``) or is ``None``.
    """

    COMMAND: ClassVar[Command] = Command.READY
    pid: int
    versions: list[int]
    capacity: int
    sandbox: dict[str, Any]
    probe: dict[str, Any] | None = None

    def to_body(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "versions": self.versions,
            "capacity": self.capacity,
            "sandbox": self.sandbox,
            "probe": self.probe,
        }

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Ready:
        versions = s.req_list(body, "versions")
        if not versions or any(type(v) is not int for v in versions):
            raise MalformedMessage("field 'versions' must be a non-empty array of int")
        capacity = s.req_int(body, "capacity")
        if capacity < 1:
            raise MalformedMessage("field 'capacity' must be >= 1")
        return cls(
            s.req_int(body, "pid"), versions, capacity, s.req_dict(body, "sandbox"), s.opt_dict(body, "probe")
        )


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """Either way, when a peer has been silent for one interval; ``stats`` is informational only."""

    COMMAND: ClassVar[Command] = Command.HEARTBEAT
    stats: dict[str, Any] = field(default_factory=dict)

    def to_body(self) -> dict[str, Any]:
        return {"stats": self.stats}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Heartbeat:
        return cls(s.req_dict(body, "stats"))


@dataclass(frozen=True, slots=True)
class Goodbye:
    """W→C just before a worker exits on purpose, so its exit is not taken for a crash."""

    COMMAND: ClassVar[Command] = Command.GOODBYE
    reason: str

    def to_body(self) -> dict[str, Any]:
        return {"reason": self.reason}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Goodbye:
        return cls(s.req_str(body, "reason"))


@dataclass(frozen=True, slots=True)
class Shutdown:
    """C→W: finish or cancel in-flight calls, send GOODBYE, exit."""

    COMMAND: ClassVar[Command] = Command.SHUTDOWN
    reason: str

    def to_body(self) -> dict[str, Any]:
        return {"reason": self.reason}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Shutdown:
        return cls(s.req_str(body, "reason"))
