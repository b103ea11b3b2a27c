"""A call's messages on the worker's side: a CALL's fields in, its RESULT or ERROR frames out.

The worker reads a plainly valid CALL into a tuple (``proto.frames.decode_plain_call``) and encodes
its RESULT in one pass (``proto.frames.encode_result``): building the frozen ``Call`` and ``Result``
messages cost a few µs of every call.
"""

from __future__ import annotations

import resource
from typing import Any, NamedTuple

from proto import Call, Error, ErrorClass, Kind, Op, ProtocolError, encode
from proto.frames import encode_result
from worker.engine import Outcome, ScriptFailure

__all__ = ["CallFields", "failure_message", "outcome_frames", "peak_rss"]


class CallFields(NamedTuple):
    """A CALL's fields, ``proto.Call``'s in its order: a tuple is built several times faster than the
    frozen message, and the worker builds one per call."""

    id: int
    op: Op
    kind: Kind
    sha: str
    fn: str
    args: list[Any]
    timeout: float | None
    tenant: str
    name: str
    source: str | None
    window: int
    resident: dict[str, Any] | None

    @classmethod
    def of(cls, call: Call) -> CallFields:
        return cls(
            call.id, call.op, call.kind, call.sha, call.fn, call.args, call.timeout, call.tenant, call.name,
            call.source, call.window, call.resident,
        )  # fmt: skip


def peak_rss() -> int:
    """This process's peak resident set, in bytes."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def outcome_frames(call_id: int, outcome: Outcome | Error) -> list[bytes]:
    """The call's RESULT (or its ERROR); an INVALID_VALUE ERROR when a value cannot leave the sandbox."""
    try:
        if type(outcome) is Error:
            return encode(outcome)
        assert type(outcome) is Outcome
        return encode_result(
            call_id, outcome.value, outcome.wall, outcome.cpu, peak_rss(), outcome.ops, outcome.output
        )
    except ProtocolError as exc:
        return encode(
            Error(call_id, ErrorClass.INVALID_VALUE, f"the return value cannot leave the sandbox: {exc}")
        )


def failure_message(call_id: int, failure: ScriptFailure) -> Error:
    """The ERROR ending call ``call_id`` after ``failure``."""
    return Error(
        call_id,
        failure.cls,
        failure.message,
        failure.kind,
        failure.line,
        failure.column,
        failure.value,
        failure.limit,
    )
