"""Fuzzing the wire decoder (issue 10 point 9): whatever bytes a worker sends, ``decode`` either returns
a message or raises ``ProtocolError``; and a message it accepted can be sent back (the two sides
agree). Bounded: each property runs a fixed number of examples with no deadline.

Structure-aware: beside random bytes, the inputs are real frames of every command with mutations
(flips, inserts, deletions, splices), bodies with each command's own keys and hostile values, and
flattened deep values with hostile node lists.
"""

from __future__ import annotations

from typing import Any

import msgpack
from hypothesis import given, settings
from hypothesis import strategies as st

import proto
from proto import (
    Call,
    Cancel,
    Chunk,
    Credit,
    Error,
    Goodbye,
    Heartbeat,
    HostCall,
    HostChunk,
    HostReply,
    ProtocolError,
    Ready,
    Result,
    Shutdown,
    decode,
    encode,
)
from proto.frames import MESSAGE_TYPES
from proto.values import DEEP_EXT, pack, unpack

SHA = "ab" * 32
SAMPLES: list[Any] = [
    Ready(pid=42, versions=[1], capacity=64, sandbox={"rlimits": {"active": True, "detail": "ok"}}),
    Heartbeat(stats={"rss": 10, "calls": 3}),
    Goodbye(reason="shutdown"),
    Shutdown(reason="recycle"),
    Call(7, "call", "region", SHA, "render", [{"a": [1, 2.5, None, True, "x", b"\x00"]}], 2.0, "t1"),
    Call(8, "load", "provider", SHA, "", [], None, "t1", name="p.rhai", source="fn f() { 1 }"),
    Call(9, "stream", "provider", SHA, "stream", [{}, {"model": "m"}], 30.0, "acme", window=4),
    Result(7, {"blocks": ["x"]}, wall=0.001, cpu=0.0005, peak_rss=1 << 20, ops=12, output=["hi"]),
    Error(7, "ScriptError", "boom", kind="ScriptThrow", line=3, column=9, value={"transient": True}),
    Error(7, "LimitExceeded", "too many operations", kind="TooManyOperations", limit="operations"),
    Chunk(7, 0, {"delta": "he"}),
    Chunk(7, 1, None, "no wire form"),
    Cancel(7),
    Credit(7, 0, 1),
    HostCall(7, 1, "http_get", ["http://x", {"a": "b"}]),
    HostReply(7, 1, False, {"kind": "api", "message": "HTTP 500"}),
    HostChunk(7, 1, 3, '{"x":1}'),
]
FRAMES = [encode(m)[0] for m in SAMPLES]

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**64 - 1)  # what msgpack can carry, signed and unsigned
    | st.floats()
    | st.text(max_size=12)
    | st.binary(max_size=12)
    | st.sampled_from(["call", "load", "stream", "region", "provider", SHA, "http_get", "stream_request"])
)
hostile = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=6) | st.integers(-5, 5) | st.binary(max_size=2), inner, max_size=4)
    ),
    max_leaves=12,
)


def accepts_or_refuses(frames: list[bytes]) -> None:
    """The decoder's contract, plus: what it accepts, the sender side can encode and it reads back."""
    try:
        message = decode(frames)
    except ProtocolError:
        return
    again = encode(message)
    assert decode(again) == message


@st.composite
def mutated_frames(draw: st.DrawFn) -> bytes:
    frame = bytearray(draw(st.sampled_from(FRAMES)))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["flip", "set", "insert", "delete", "splice"]))
        at = draw(st.integers(0, max(len(frame) - 1, 0)))
        if op == "flip" and frame:
            frame[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "set" and frame:
            frame[at] = draw(st.integers(0, 255))
        elif op == "insert":
            frame[at:at] = draw(st.binary(min_size=1, max_size=8))
        elif op == "delete":
            del frame[at : at + draw(st.integers(1, 8))]
        else:  # a piece of another command's frame: plausible msgpack in the wrong place
            donor = draw(st.sampled_from(FRAMES))
            start = draw(st.integers(0, len(donor) - 1))
            frame[at:at] = donor[start : start + draw(st.integers(1, 16))]
    return bytes(frame)


@given(mutated_frames())
@settings(max_examples=400, deadline=None)
def test_mutated_frames_of_every_command(frame: bytes) -> None:
    accepts_or_refuses([frame])


@st.composite
def bodies_with_real_keys(draw: st.DrawFn) -> tuple[int, dict[str, Any]]:
    """A command byte and a body made of that command's own field names with hostile values."""
    command, cls = draw(st.sampled_from(sorted(MESSAGE_TYPES.items())))
    sample = next(m for m in SAMPLES if type(m) is cls)
    body = dict(sample.to_body())
    for key in draw(st.lists(st.sampled_from(sorted(body)), max_size=3, unique=True)):
        if draw(st.booleans()):
            body[key] = draw(hostile)
        else:
            del body[key]
    if draw(st.booleans()):
        body[draw(st.text(max_size=6))] = draw(hostile)
    return int(command), body


@given(bodies_with_real_keys())
@settings(max_examples=400, deadline=None)
def test_bodies_with_each_commands_keys_and_hostile_values(case: tuple[int, dict[str, Any]]) -> None:
    command, body = case
    raw = msgpack.packb(body, use_bin_type=True)
    accepts_or_refuses([proto.SIGNATURE + bytes((command,)) + raw])


nodes = st.lists(
    st.none()
    | st.integers(-3, 3)
    | st.text(max_size=3)
    | st.lists(st.integers(-2, 1_000_001), max_size=3)
    | st.sampled_from([[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2], [0, 10**9], [2, 1]]),
    max_size=30,
)


@given(nodes)
@settings(max_examples=300, deadline=None)
def test_flattened_values_with_hostile_node_lists(nodes: list[Any]) -> None:
    data = msgpack.packb(msgpack.ExtType(DEEP_EXT, msgpack.packb(nodes, use_bin_type=True)))
    try:
        value = unpack(data)
    except ProtocolError:
        return
    assert unpack(pack(value)) == value


def unwrap(value: Any, shape: str) -> tuple[int, Any]:
    """Depth and leaf of a one-path nesting, walked without recursion (``==`` would recurse)."""
    depth = 0
    while isinstance(value, list if shape == "list" else dict):
        assert len(value) == 1
        value = value[0] if shape == "list" else value["k"]
        depth += 1
    return depth, value


leaves = st.none() | st.integers(-5, 5) | st.text(max_size=4)


@given(st.integers(1001, 3000), st.sampled_from(["list", "map"]), leaves)
@settings(max_examples=20, deadline=None)
def test_deep_values_round_trip_through_the_flattened_form(depth: int, shape: str, leaf: Any) -> None:
    value: Any = leaf
    for _ in range(depth):
        value = [value] if shape == "list" else {"k": value}
    assert unwrap(unpack(pack(value)), shape) == (depth, leaf)
