"""``worker.messages.CallFields`` mirrors ``proto.Call`` field for field.

The worker reads a plainly valid CALL into this tuple (building the frozen message cost a few µs of
every call), and ``proto.frames.decode_plain_call`` fills it positionally, so a field added to
``Call`` must be added here in the same place, or the worker would read every later field shifted.
"""

from __future__ import annotations

import dataclasses

from proto import Call
from worker.messages import CallFields

SHA = "ab" * 32


def test_call_fields_name_calls_fields_in_calls_order() -> None:
    assert CallFields._fields == tuple(field.name for field in dataclasses.fields(Call))


def test_a_call_read_either_way_gives_the_same_fields() -> None:
    resident = {"key": "k" * 43, "version": 3, "base": None, "drop": [], "entries": [{"id": 1}]}
    call = Call(9, "call", "region", SHA, "render", [{"entries": []}], 2.0, "t1", "r.rhai", None, 8, resident)
    assert tuple(CallFields.of(call)) == tuple(getattr(call, name) for name in CallFields._fields)
