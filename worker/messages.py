"""A call's messages on the worker's side: its RESULT or ERROR frames out.

A CALL the native lane does not run is read by ``proto.decode`` into a ``proto.Call``, and its RESULT
written by ``proto.encode``: the wire's one reader and one writer of each message in Python.
"""

from __future__ import annotations

import resource

from proto import Error, ErrorClass, ProtocolError, Result, encode
from worker.engine import Outcome, ScriptFailure

__all__ = ["failure_message", "outcome_frames", "peak_rss"]


def peak_rss() -> int:
    """This process's peak resident set, in bytes."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def outcome_frames(call_id: int, outcome: Outcome | Error) -> list[bytes]:
    """The call's RESULT (or its ERROR); an INVALID_VALUE ERROR when a value cannot leave the sandbox."""
    try:
        if type(outcome) is Error:
            return encode(outcome)
        assert type(outcome) is Outcome
        return encode(
            Result(call_id, outcome.value, outcome.wall, outcome.cpu, peak_rss(), outcome.ops, outcome.output)
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
