"""The native lane: a plain region call from its CALL frame to its RESULT frame inside rhai-python.

In Python a trivial region call spent ~8 µs reading the CALL, converting values both ways and
writing the RESULT, around ~1 µs of script.  ``rhai.Lane`` does that work in one native step,
msgpack straight to Rhai values and back, with the GIL released while the hook runs.  It takes
only what it can do exactly as this worker's Python path does: a plainly valid CALL (op ``call``,
kind ``region``) of a script it holds (a ``source`` sent along is ignored, as here); a render's
``resident`` delta is applied to the same lists the Python path uses (``worker/resident.py``),
before the hook runs, as there.  For anything else it runs nothing and the Python path
(``worker.loop``) reads the frame, which stays the readable reference: ``tests/worker/test_lane.py``
checks that both paths send the same bytes.

The lane's frame layout is built here from ``proto``, the one definition of the wire.
"""

from __future__ import annotations

from typing import Any

import rhai

from proto import MAX_BODY_BYTES, MAX_CONTAINER_LEN, encode
from proto.calls import MAX_RESIDENT_KEY
from proto.commands import Command
from proto.frames import SIGNATURE
from proto.schema import MAX_ID
from proto.values import MAX_PLAIN_DEPTH
from worker.engine import Outcome, translate
from worker.messages import failure_message, outcome_frames
from worker.resident import resident_missing

__all__ = ["lane_frames", "new_lane"]


def new_lane(resident: rhai.ResidentLists | None = None) -> rhai.Lane:
    """A lane that reads and writes this protocol version's CALL and RESULT frames, applying
    renders' deltas to ``resident`` (the worker's ``ResidentStore.lists``; without it, resident
    calls are left to the Python path), and hands HOST_REPLY frames to the ``rhai.HostLine``
    waiting for them (``worker.host_bridge``)."""
    return rhai.Lane(
        call_header=SIGNATURE + bytes((Command.CALL,)),
        result_header=SIGNATURE + bytes((Command.RESULT,)),
        max_id=MAX_ID,
        max_body=MAX_BODY_BYTES,
        max_container=MAX_CONTAINER_LEN,
        max_depth=MAX_PLAIN_DEPTH,
        max_resident_key=MAX_RESIDENT_KEY,
        resident=resident,
        reply_header=SIGNATURE + bytes((Command.HOST_REPLY,)),
    )


def lane_frames(ended: bytes | tuple[Any, ...]) -> list[bytes]:
    """The frames ending a call the lane ran: its RESULT as the lane wrote it, or as the Python
    path writes it (a value the wire refuses or flattens), or the ERROR for its failure."""
    if isinstance(ended, bytes):
        return [ended]
    if len(ended) == 3:  # (id, "missing", base): the delta's base is not held
        call_id, _, base = ended
        return encode(failure_message(call_id, resident_missing(base)))
    if len(ended) == 2:
        call_id, exc = ended
        return encode(failure_message(call_id, translate(exc)))
    call_id, value, wall, cpu, ops, output = ended
    return outcome_frames(call_id, Outcome(value, wall, cpu, ops, output))
