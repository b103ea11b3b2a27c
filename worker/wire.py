"""The worker's one codec: every frame it receives is read, and every frame it sends is written, natively.

    frame ─▶ rhai.Lane.run ── a plain region call of a script it holds: CALL to RESULT in one native
       │                      step, msgpack straight to Rhai values and back, the GIL released while
       │                      the hook runs (a trivial call: ~8 µs of Python saved)
       └──▶ rhai.Codec.read ─ everything else: ``(command, field, ...)`` for the Python logic here
                              (script cache, provider calls' channels, threads)
    Python values ─▶ rhai.Codec.ready / heartbeat / goodbye / result / error / chunk / credit /
                     host_call ─▶ frame

``proto`` is the coordinator's codec and the one definition of the wire: this module only takes its
constants (signature, command bytes, caps, vocabulary) and hands them to the binding
(rhai-python/src/wire/: ``codec.rs`` and ``values.rs`` mirror ``proto``'s readers and writers check
for check, ``lane.rs`` and ``msgpack.rs`` the plain region call).  The reader refuses what
``proto.decode`` refuses (``ValueError``; ``OverflowError`` past a cap), the writers write what
``proto.encode`` writes, and a value without wire form ends as ``proto``'s worker ended it: the
ERROR ``InvalidValue`` "the return value cannot leave the sandbox: ...", a CHUNK carrying its error,
a HOST_CALL refused (``tests/worker/test_wire.py`` checks all three against ``proto``).

Why not all of it natively: a provider call's logic (its channel, its host calls' waits, its
stream's credit) is Python, and a provider call waits ~100 ms on its API; read natively into
Python objects, it costs what ``proto``'s reader cost, without a second codec.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

import rhai

from proto import MAX_BODY_BYTES, MAX_CONTAINER_LEN, SIGNATURE, Command, ErrorClass, Kind, Op
from proto.calls import MAX_RESIDENT_KEY
from proto.schema import MAX_ID
from proto.values import MAX_PLAIN_DEPTH
from worker.engine import Outcome, ScriptFailure

__all__ = [
    "CODEC",
    "Request",
    "error_frame",
    "failure_frame",
    "new_lane",
    "outcome_frame",
]

CODEC: Final = rhai.Codec(
    signature=SIGNATURE,
    commands={command.name: int(command) for command in Command},
    max_id=MAX_ID,
    max_body=MAX_BODY_BYTES,
    max_container=MAX_CONTAINER_LEN,
    max_depth=MAX_PLAIN_DEPTH,
    max_resident_key=MAX_RESIDENT_KEY,
    ops={str(op): op for op in Op},
    kinds={str(kind): kind for kind in Kind},
    op_call=Op.CALL,
    kind_region=Kind.REGION,
    invalid_value=ErrorClass.INVALID_VALUE,
)
"""Reads every frame the worker receives (but the lane's) and writes every frame it sends."""


class Request(NamedTuple):
    """A CALL as ``CODEC.read`` hands it over (after its command byte), in RHP §6.3's field order."""

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


def new_lane(resident: rhai.ResidentLists | None = None) -> rhai.Lane:
    """A lane that runs this protocol version's plain region calls, applying renders' deltas to
    ``resident`` (the worker's ``ResidentStore.lists``; without it, resident calls are read by
    ``CODEC``), and hands HOST_REPLY frames to the ``rhai.HostLine`` waiting for them
    (``worker.host_bridge``); a value the wire flattens or refuses is written by ``CODEC``."""
    return rhai.Lane(
        call_header=SIGNATURE + bytes((Command.CALL,)),
        result_header=SIGNATURE + bytes((Command.RESULT,)),
        max_id=MAX_ID,
        max_body=MAX_BODY_BYTES,
        max_container=MAX_CONTAINER_LEN,
        max_depth=MAX_PLAIN_DEPTH,
        codec=CODEC,
        max_resident_key=MAX_RESIDENT_KEY,
        resident=resident,
        reply_header=SIGNATURE + bytes((Command.HOST_REPLY,)),
    )


def error_frame(call_id: int, cls: ErrorClass, message: str, kind: str = "") -> bytes:
    """The ERROR ending call ``call_id`` for a reason of the worker's own (not a script's failure)."""
    return CODEC.error(call_id, cls, message, kind, None, None, None, None)


def failure_frame(call_id: int, failure: ScriptFailure) -> bytes:
    """The ERROR ending call ``call_id`` after ``failure``."""
    f = failure
    return CODEC.error(call_id, f.cls, f.message, f.kind, f.line, f.column, f.value, f.limit)


def outcome_frame(call_id: int, outcome: Outcome | ScriptFailure) -> bytes:
    """The call's RESULT, or its ERROR (``InvalidValue`` when a value cannot leave the sandbox)."""
    if type(outcome) is Outcome:
        return CODEC.result(call_id, outcome.value, outcome.wall, outcome.cpu, outcome.ops, outcome.output)
    assert isinstance(outcome, ScriptFailure)
    return failure_frame(call_id, outcome)
