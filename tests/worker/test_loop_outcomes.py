"""How a call's outcome leaves a real worker: its RESULT, and an ERROR when a value has no wire form.

The worker reads each CALL and writes each RESULT with ``proto``'s one codec (the native lane aside,
``tests/worker/test_lane.py``); these tests pin down how every outcome answers.
"""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterator

import msgpack
import pytest
from bare_worker import BareWorker

from proto import Call, Error, ErrorClass, Kind, Op, Ready, Result, encode

SOURCE = """
fn echo(x) { x }
fn pointer() { Fn("echo") }
fn throw_pointer() { throw Fn("echo") }
fn printed(x) { print("saw " + x); x * 2 }
"""
SHA = hashlib.sha256(SOURCE.encode()).hexdigest()


@pytest.fixture
def bare() -> Iterator[BareWorker]:
    with tempfile.TemporaryDirectory() as tmp:
        peer = BareWorker(tmp)
        try:
            assert isinstance(peer.recv(), Ready)
            yield peer
        finally:
            peer.close()


def _call(peer: BareWorker, fn: str, args: list[object], kind: Kind = Kind.REGION) -> int:
    call_id = next(peer.ids)
    peer.send(Call(call_id, Op.CALL, kind, SHA, fn, args, 10.0, "t", "t.rhai", SOURCE))
    return call_id


@pytest.mark.parametrize("kind", [Kind.REGION, Kind.PROVIDER])
def test_a_result_carries_value_output_and_costs(bare: BareWorker, kind: Kind) -> None:
    call_id = _call(bare, "printed", [21], kind)
    reply = bare.recv()
    assert isinstance(reply, Result)
    assert (reply.id, reply.value, reply.output) == (call_id, 42, ["saw 21"])
    assert reply.wall > 0 and reply.cpu >= 0 and reply.peak_rss > 0 and reply.ops > 0


@pytest.mark.parametrize("kind", [Kind.REGION, Kind.PROVIDER])
@pytest.mark.parametrize("fn", ["pointer", "throw_pointer"])
def test_a_value_without_wire_form_ends_the_call_in_invalid_value(
    bare: BareWorker, kind: Kind, fn: str
) -> None:
    call_id = _call(bare, fn, [], kind)
    reply = bare.recv()
    assert isinstance(reply, Error) and (reply.id, reply.cls) == (call_id, ErrorClass.INVALID_VALUE)
    assert reply.message.startswith("the return value cannot leave the sandbox: ")
    after = _call(bare, "echo", ["still serving"], kind)
    reply = bare.recv()
    assert isinstance(reply, Result) and (reply.id, reply.value) == (after, "still serving")


def test_a_call_not_plainly_valid_is_still_read_and_answered(bare: BareWorker) -> None:
    """An int timeout is valid but not on the one-pass reader's path: the careful reader takes it."""
    frame = encode(Call(77, Op.CALL, Kind.REGION, SHA, "echo", [[1, {"k": 2}]], 10.0, "t", "t.rhai", SOURCE))[
        0
    ]
    body = msgpack.unpackb(frame[5:]) | {"timeout": 10}
    bare.sock.send_multipart([bare.identity, frame[:5] + msgpack.packb(body)])
    reply = bare.recv()
    assert isinstance(reply, Result) and (reply.id, reply.value) == (77, [1, {"k": 2}])
