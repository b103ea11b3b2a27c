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


def _plain_sha(sha: str) -> bool:
    if len(sha) != 64 or not _HEX.issuperset(sha):
        return False
    if len(_SEEN_SHAS) >= 4096:
        _SEEN_SHAS.clear()
    _SEEN_SHAS.add(sha)
    return True


def _plain_call(cls: type[Call], body: Mapping[str, Any]) -> Call | None:
    """One pass over a CALL body whose every field is plainly valid (a float or no timeout); ``None``
    when in any doubt, and the field-by-field reader then names the defect.

    Both sides read every CALL (the coordinator checks what it sends): this keeps that check cheap."""
    fields = _plain_call_fields(body)
    return None if fields is None else cls(*fields)


def _plain_call_fields(body: Mapping[str, Any]) -> tuple[Any, ...] | None:
    get: Callable[[str], Any] = body.get
    ident, op_name, kind_name, sha, window = get("id"), get("op"), get("kind"), get("sha"), get("window")
    timeout, source, args = get("timeout"), get("source"), get("args")
    fn, tenant, name = get("fn"), get("tenant"), get("name")
    if not (
        type(args) is list
        and _plain_call_params(ident, op_name, kind_name, sha, fn, timeout, tenant, name, source, window)
    ):
        return None
    op, kind = _OP_OF.get(op_name), _KIND_OF.get(kind_name)
    if op is None or kind is None:  # never, after the check above (which asked the same maps)
        return None
    resident = get("resident")
    if resident is not None and not _plain_resident(resident, op, kind, args):
        return None
    return ident, op, kind, sha, fn, args, timeout, tenant, name, source, window, resident


def _plain_call_params(
    ident: Any, op_name: Any, kind_name: Any, sha: Any, fn: Any, timeout: Any, tenant: Any, name: Any,
    source: Any, window: Any,
) -> bool:  # fmt: skip
    """Every CALL field but ``args`` and ``resident`` plainly valid: the one-pass reader's rule, which
    ``proto.frames.encode_call`` asks of its parameters directly (no body lookups)."""
    return (
        type(ident) is int and 0 <= ident <= s.MAX_ID
        and type(op_name) is str and op_name in _OP_OF and type(kind_name) is str and kind_name in _KIND_OF
        and type(sha) is str and (sha in _SEEN_SHAS or _plain_sha(sha))
        and type(window) is int and 1 <= window <= 1024
        and (timeout is None or (type(timeout) is float and timeout > 0))
        and (source is None or type(source) is str)
        and type(fn) is str and type(tenant) is str and type(name) is str
    )  # fmt: skip


def _plain_resident(resident: Any, op: Op, kind: Kind, args: list[Any]) -> bool:
    """``check_resident``'s rules in one pass, for the common case: a steady region's render carries a
    resident map on every call.  ``False`` when in any doubt (the careful reader names the defect)."""
    if type(resident) is not dict or op is not Op.CALL or kind is not Kind.REGION:
        return False
    get = resident.get
    key, version, base, drop = get("key"), get("version"), get("base"), get("drop")
    return (
        bool(args) and type(args[0]) is dict
        and type(key) is str and 16 <= len(key) <= MAX_RESIDENT_KEY
        and type(version) is int and 0 <= version <= s.MAX_ID
        and (base is None or (type(base) is int and 0 <= base <= s.MAX_ID))
        and type(drop) is list and type(get("entries")) is list
        and (not drop if base is None else _ascending_ids(drop))
    )  # fmt: skip


def _ascending_ids(drop: list[Any]) -> bool:
    return (
        all(type(i) is int for i in drop)
        and (not drop or drop[0] >= 0)
        and all(b > a for a, b in pairwise(drop))
    )


def _plain_result(cls: type[Result], body: Mapping[str, Any]) -> Result | None:
    """A RESULT body whose every field is plainly valid, in one pass; ``None`` when in any doubt."""
    fields = _plain_result_fields(body)
    return None if fields is None else cls(*fields)


_ResultFields = tuple[int, Any, float, float, int, int, list[str]]


def _plain_result_fields(body: Mapping[str, Any]) -> _ResultFields | None:
    """``_plain_result``'s fields in ``Result``'s order, not built into one (``proto.frames.PlainResult``)."""
    get = body.get
    ident, wall, cpu, peak_rss, ops, output = (
        get("id"), get("wall"), get("cpu"), get("peak_rss"), get("ops"), get("output")
    )  # fmt: skip
    if not (
        type(ident) is int and 0 <= ident <= s.MAX_ID
        and type(wall) is float and type(cpu) is float
        and type(peak_rss) is int and type(ops) is int
        and type(output) is list and (not output or all(type(line) is str for line in output))
        and "value" in body
    ):  # fmt: skip
        return None
    return (ident, body["value"], wall, cpu, peak_rss, ops, output)


def call_body(
    id: int, op: Op, kind: Kind, sha: str, fn: str, args: list[Any], timeout: float | None, tenant: str,
    name: str, source: str | None, window: int, resident: dict[str, Any] | None,
) -> dict[str, Any]:  # fmt: skip
    """The body of ``Call(...)``, without building the message (``proto.frames.encode_call``)."""
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
        return _plain_call(cls, body) or cls._checked(body)

    @classmethod
    def check(cls, body: Mapping[str, Any]) -> None:
        """Raise what ``from_body`` would raise for ``body``; nothing is built for a plainly valid one."""
        if _plain_call_fields(body) is None:
            cls._checked(body)

    @classmethod
    def _checked(cls, body: Mapping[str, Any]) -> Call:
        op_name, kind_name, sha = s.req_str(body, "op"), s.req_str(body, "kind"), s.req_str(body, "sha")
        op, kind = _OP_OF.get(op_name), _KIND_OF.get(kind_name)
        if op is None or kind is None:
            raise MalformedMessage(f"unknown op {op_name!r} or kind {kind_name!r}")
        if len(sha) != 64 or not _HEX.issuperset(sha):
            raise MalformedMessage("field 'sha' must be 64 lowercase hex digits")
        timeout = s.opt_float(body, "timeout")
        if timeout is not None and not timeout > 0:
            raise MalformedMessage("field 'timeout' must be positive")
        window = s.req_int(body, "window")
        if not 1 <= window <= 1024:
            raise MalformedMessage("field 'window' must be in 1..1024")
        args = s.req_list(body, "args")
        return cls(
            s.req_id(body), op, kind, sha, s.req_str(body, "fn"), args, timeout, s.req_str(body, "tenant"),
            s.req_str(body, "name"), s.opt_str(body, "source"), window, check_resident(body, op, kind, args),
        )  # fmt: skip


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
        """The RESULT ``body`` describes; ``MalformedMessage`` naming the first bad field."""
        return _plain_result(cls, body) or cls._checked(body)

    @classmethod
    def _checked(cls, body: Mapping[str, Any]) -> Result:
        output = s.req_list(body, "output")
        if any(type(line) is not str for line in output):
            raise MalformedMessage("field 'output' must be an array of str")
        return cls(
            s.req_id(body), s.any_value(body, "value"), s.req_float(body, "wall"), s.req_float(body, "cpu"),
            s.req_int(body, "peak_rss"), s.req_int(body, "ops"), output,
        )  # fmt: skip


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
