"""RHN/1 node-control messages: every one round-trips, and a defect is a ``ProtocolError``, never more."""

from __future__ import annotations

import pytest

from proto import MalformedMessage, ProtocolError, TooLarge, UnknownCommand, VersionMismatch
from proto.nodes import (
    MAX_NODE_FRAME,
    NODE_SIGNATURE,
    Bye,
    Drain,
    Hello,
    KillWorker,
    NodeBeat,
    Reset,
    Spawned,
    Welcome,
    WorkerExited,
    decode_node,
    encode_node,
)
from proto.values import pack

WORKER = bytes(range(8))
MESSAGES = [
    Hello("node-1", 4, 123, [1]),
    Welcome(0.5, 2.5, {"memory-bytes": 1 << 30, "heartbeat": 0.25, "capacity": 64}),
    NodeBeat({WORKER: 50_000_000}),
    NodeBeat(),
    Spawned(WORKER, 99),
    WorkerExited(WORKER, -9, "panicked at ..."),
    KillWorker(WORKER),
    Drain("SIGTERM"),
    Bye("drained"),
    Reset("session expired"),
]


@pytest.mark.parametrize("message", MESSAGES, ids=lambda m: type(m).__name__)
def test_every_message_round_trips(message: object) -> None:
    assert decode_node([encode_node(message)]) == message  # type: ignore[arg-type]


def frame(command: int, body: object) -> bytes:
    return NODE_SIGNATURE + bytes((command,)) + pack(body)


@pytest.mark.parametrize(
    ("frames", "error"),
    [
        ([b"RHP\x01\x01" + pack({})], VersionMismatch),  # a worker frame is not a node message
        ([b"RHN\x02\x01" + pack({})], VersionMismatch),
        ([frame(0x7F, {})], UnknownCommand),
        ([frame(0x01, {}), b"x"], MalformedMessage),  # two frames are relay traffic, not control
        ([frame(0x01, {"name": "n", "workers": 0, "pid": 1, "versions": [1]})], MalformedMessage),
        ([frame(0x01, {"name": "n", "workers": 1, "pid": 1, "versions": []})], MalformedMessage),
        ([frame(0x01, {"name": "n" * 5000, "workers": 1, "pid": 1, "versions": [1]})], MalformedMessage),
        ([frame(0x02, {"heartbeat": 0, "liveness": 1, "worker_args": {}})], MalformedMessage),
        ([frame(0x02, {"heartbeat": 1, "liveness": 1, "worker_args": {"exec": 1}})], MalformedMessage),
        ([frame(0x02, {"heartbeat": 1, "liveness": 1, "worker_args": {"capacity": "x"}})], MalformedMessage),
        ([frame(0x04, {"worker": b"short", "pid": 1})], MalformedMessage),
        ([frame(0x03, {"rss": [[WORKER, "big"]]})], MalformedMessage),
        ([NODE_SIGNATURE + b"\x03" + b"\x00" * MAX_NODE_FRAME], TooLarge),
    ],
)
def test_defects_are_protocol_errors(frames: list[bytes], error: type[ProtocolError]) -> None:
    with pytest.raises(error):
        decode_node(frames)


def test_the_welcome_passes_only_the_worker_limits_a_node_may_apply() -> None:
    """A coordinator cannot make a node start workers with arbitrary flags (``--connect``, ``--probe``)."""
    for flag in ("connect", "identity", "parent-pid", "probe"):
        with pytest.raises(MalformedMessage):
            decode_node([frame(0x02, {"heartbeat": 1, "liveness": 1, "worker_args": {flag: 1}})])
