"""Script invocation family: CALL, RESULT, ERROR, CHUNK, CANCEL, CREDIT.

A CALL with ``op="load"`` compiles and describes a script; ``op="call"`` runs one
function; ``op="stream"`` runs one function with a chunk emitter appended to its
arguments.  Every CALL ends in exactly one RESULT or ERROR carrying its ``id``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any, ClassVar, Final

from proto import schema as s
from proto.commands import Command
from proto.errors import MalformedMessage
from proto.vocabulary import ErrorClass, Kind, Op

__all__ = [
    "ERROR_CLASSES",
    "KINDS",
    "MAX_RESIDENT_KEY",
    "OPS",
    "Call",
    "Cancel",
    "Chunk",
    "Credit",
    "Error",
    "Result",
    "call_body",
    "check_resident",
]

KINDS: Final = frozenset(Kind)
OPS: Final = frozenset(Op)
ERROR_CLASSES: Final = frozenset(ErrorClass)
"""The enums as sets (members hash as their strings, so ``"load" in OPS`` holds)."""
_OP_OF: Final = {str(m): m for m in Op}
_KIND_OF: Final = {str(m): m for m in Kind}
_ERROR_CLASS_OF: Final = {str(m): m for m in ErrorClass}
MAX_RESIDENT_KEY: Final = 128
_HEX: Final = frozenset("0123456789abcdef")


def check_resident(body: Mapping[str, Any], op: Op, kind: Kind, args: list[Any]) -> dict[str, Any] | None:
    """The CALL's optional ``resident`` map, checked: the worker may trust every field it reads."""
    resident = s.opt_dict(body, "resident")
    if resident is None:
        return None
    if op != Op.CALL or kind != Kind.REGION or not args or type(args[0]) is not dict:
        raise MalformedMessage("field 'resident' needs op=call, kind=region and a map as first argument")
    key = s.req_str(resident, "key")
    if not 16 <= len(key) <= MAX_RESIDENT_KEY:
        raise MalformedMessage(f"field 'resident.key' must be 16..{MAX_RESIDENT_KEY} characters")
    s.req_id(resident, "version")
    base = s.opt_int(resident, "base")
    drop = s.req_list(resident, "drop")
    s.req_list(resident, "entries")
    if base is not None and not 0 <= base <= s.MAX_ID:
        raise MalformedMessage("field 'resident.base' must be an id or nil")
    if base is None and drop:
        raise MalformedMessage("field 'resident.drop' must be empty for a full list")
    if any(type(i) is not int for i in drop) or any(b <= a for a, b in pairwise(drop)):
        raise MalformedMessage("field 'resident.drop' must be strictly ascending ints")
    if drop and drop[0] < 0:
        raise MalformedMessage("field 'resident.drop' must not be negative")
    return resident


_SEEN_SHAS: Final[set[str]] = set()
"""Script hashes already found well-formed: a pool calls few scripts many times (bounded below)."""


def _known_sha(sha: str) -> bool:
    """Whether ``sha`` is 64 lowercase hex digits (remembered: both sides read every CALL)."""
    if sha in _SEEN_SHAS:
        return True
    if len(sha) != 64 or not _HEX.issuperset(sha):
        return False
    if len(_SEEN_SHAS) >= 4096:
        _SEEN_SHAS.clear()
    _SEEN_SHAS.add(sha)
    return True


def call_body(
    id: int, op: Op, kind: Kind, sha: str, fn: str, args: list[Any], timeout: float | None, tenant: str,
    name: str, source: str | None, window: int, resident: dict[str, Any] | None,
) -> dict[str, Any]:  # fmt: skip
    """The one CALL body writer: ``Call(...).to_body()`` without building the message
    (``proto.frames.encode_call``, the coordinator's every attempt)."""
    body: dict[str, Any] = {
        "id": id,
        "op": str(op),  # the plain string: the receiving schema checks exact types
        "kind": str(kind),
        "sha": sha,
        "fn": fn,
        "args": args,
        "timeout": timeout,
        "tenant": tenant,
        "name": name,
        "source": source,
        "window": window,
    }
    if resident is not None:  # absent otherwise: calls without it keep their exact bytes
        body["resident"] = resident
    return body


_CallFields = tuple[
    int, Op, Kind, str, str, list[Any], float | None, str, str, str | None, int, dict[str, Any] | None
]


def _call_fields(body: Mapping[str, Any]) -> _CallFields:
    """The one CALL reader: the body's fields in ``Call``'s order; ``MalformedMessage`` naming the first
    bad field.

    One pass: each field is looked up once and its exact type tested inline; only a field that
    fails goes through ``proto.schema``, whose reader names the defect (or reads an int ``timeout``
    as the float it stands for)."""
    get: Callable[[str], Any] = body.get
    op_name, kind_name, sha = get("op"), get("kind"), get("sha")
    if type(op_name) is not str or type(kind_name) is not str or type(sha) is not str:
        op_name, kind_name, sha = s.req_str(body, "op"), s.req_str(body, "kind"), s.req_str(body, "sha")
    op, kind = _OP_OF.get(op_name), _KIND_OF.get(kind_name)
    if op is None or kind is None:
        raise MalformedMessage(f"unknown op {op_name!r} or kind {kind_name!r}")
    if not _known_sha(sha):
        raise MalformedMessage("field 'sha' must be 64 lowercase hex digits")
    timeout = get("timeout")
    if timeout is not None and type(timeout) is not float:
        timeout = s.opt_float(body, "timeout")
    if timeout is not None and not timeout > 0:
        raise MalformedMessage("field 'timeout' must be positive")
    window = get("window")
    if type(window) is not int:
        window = s.req_int(body, "window")
    if not 1 <= window <= 1024:
        raise MalformedMessage("field 'window' must be in 1..1024")
    args, ident, fn, tenant, name = get("args"), get("id"), get("fn"), get("tenant"), get("name")
    if type(args) is not list:
        args = s.req_list(body, "args")
    if type(ident) is not int or not 0 <= ident <= s.MAX_ID:
        ident = s.req_id(body)
    if type(fn) is not str or type(tenant) is not str or type(name) is not str:
        fn, tenant, name = s.req_str(body, "fn"), s.req_str(body, "tenant"), s.req_str(body, "name")
    source = get("source")
    if source is not None and type(source) is not str:
        source = s.opt_str(body, "source")
    resident = None if get("resident") is None else check_resident(body, op, kind, args)
    return ident, op, kind, sha, fn, args, timeout, tenant, name, source, window, resident


@dataclass(frozen=True, slots=True)
class Call:
    """C→W: run ``fn`` of script ``sha`` (source included only when the worker lacks it)."""

    COMMAND: ClassVar[Command] = Command.CALL
    id: int
    op: Op
    kind: Kind
    sha: str
    fn: str
    args: list[Any]
    timeout: float | None
    tenant: str
    name: str = "<script>"
    source: str | None = None
    window: int = 16
    resident: dict[str, Any] | None = None
    """Entries kept in the worker across calls (§6.3): the full list, or a delta from ``base``."""

    def to_body(self) -> dict[str, Any]:
        return call_body(
            self.id, self.op, self.kind, self.sha, self.fn, self.args, self.timeout, self.tenant, self.name,
            self.source, self.window, self.resident,
        )  # fmt: skip

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Call:
        """The CALL ``body`` describes; ``MalformedMessage`` naming the first bad field."""
        return cls(*_call_fields(body))

    @classmethod
    def check(cls, body: Mapping[str, Any]) -> None:
        """Raise what ``from_body`` would raise for ``body``, building nothing (``proto.encode``)."""
        _call_fields(body)


@dataclass(frozen=True, slots=True)
class Result:
    """W→C: the call's value and what it cost (seconds, bytes, Rhai operations)."""

    COMMAND: ClassVar[Command] = Command.RESULT
    id: int
    value: Any
    wall: float = 0.0
    cpu: float = 0.0
    peak_rss: int = 0
    ops: int = 0
    output: list[str] = field(default_factory=list)

    def to_body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "value": self.value,
            "wall": self.wall,
            "cpu": self.cpu,
            "peak_rss": self.peak_rss,
            "ops": self.ops,
            "output": self.output,
        }

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Result:
        """The RESULT ``body`` describes; ``MalformedMessage`` naming the first bad field (one pass,
        as ``Call.from_body``: an int ``wall`` or ``cpu`` reads as its float)."""
        get: Callable[[str], Any] = body.get
        ident, wall, cpu, peak_rss, ops, output = (
            get("id"), get("wall"), get("cpu"), get("peak_rss"), get("ops"), get("output")
        )  # fmt: skip
        if type(output) is not list:
            output = s.req_list(body, "output")
        if output and not all(type(line) is str for line in output):
            raise MalformedMessage("field 'output' must be an array of str")
        if type(ident) is not int or not 0 <= ident <= s.MAX_ID:
            ident = s.req_id(body)
        value = body["value"] if "value" in body else s.any_value(body, "value")
        if type(wall) is not float or type(cpu) is not float:
            wall, cpu = s.req_float(body, "wall"), s.req_float(body, "cpu")
        if type(peak_rss) is not int or type(ops) is not int:
            peak_rss, ops = s.req_int(body, "peak_rss"), s.req_int(body, "ops")
        return cls(ident, value, wall, cpu, peak_rss, ops, output)


@dataclass(frozen=True, slots=True)
class Error:
    """W→C: the call failed; ``cls`` says why, ``kind`` is the Rhai class name."""

    COMMAND: ClassVar[Command] = Command.ERROR
    id: int
    cls: ErrorClass
    message: str
    kind: str = ""
    line: int | None = None
    column: int | None = None
    value: Any = None
    limit: str | None = None

    def to_body(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "cls": str(self.cls),
            "message": self.message,
            "kind": self.kind,
            "line": self.line,
            "column": self.column,
            "value": self.value,
            "limit": None if self.limit is None else str(self.limit),
        }

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Error:
        cls_name = s.req_str(body, "cls")
        error_cls = _ERROR_CLASS_OF.get(cls_name)
        if error_cls is None:
            raise MalformedMessage(f"unknown error class {cls_name!r}")
        return cls(
            s.req_id(body), error_cls, s.req_str(body, "message"), s.req_str(body, "kind"),
            s.opt_int(body, "line"), s.opt_int(body, "column"), s.any_value(body, "value"),
            s.opt_str(body, "limit"),
        )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Chunk:
    """W→C: one streamed value of call ``id``; ``seq`` counts from 0 without gaps.

    ``error`` is set (and ``value`` nil) when the script emitted a value that has
    no wire form: the stream carries an error item and the script goes on.
    """

    COMMAND: ClassVar[Command] = Command.CHUNK
    id: int
    seq: int
    value: Any
    error: str | None = None

    def to_body(self) -> dict[str, Any]:
        return {"id": self.id, "seq": self.seq, "value": self.value, "error": self.error}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Chunk:
        return cls(
            s.req_id(body), s.req_id(body, "seq"), s.any_value(body, "value"), s.opt_str(body, "error")
        )


@dataclass(frozen=True, slots=True)
class Cancel:
    """C→W: stop call ``id``; the worker answers with ERROR ``Cancelled``
    (or its result if it won the race)."""

    COMMAND: ClassVar[Command] = Command.CANCEL
    id: int

    def to_body(self) -> dict[str, Any]:
        return {"id": self.id}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Cancel:
        return cls(s.req_id(body))


@dataclass(frozen=True, slots=True)
class Credit:
    """Either way: the receiver consumed ``n`` chunks of stream ``(id, hid)``;
    ``hid`` 0 is the call's output."""

    COMMAND: ClassVar[Command] = Command.CREDIT
    id: int
    hid: int
    n: int

    def to_body(self) -> dict[str, Any]:
        return {"id": self.id, "hid": self.hid, "n": self.n}

    @classmethod
    def from_body(cls, body: Mapping[str, Any]) -> Credit:
        n = s.req_int(body, "n")
        if not 1 <= n <= 1024:
            raise MalformedMessage("field 'n' must be in 1..1024")
        return cls(s.req_id(body), s.req_id(body, "hid"), n)
