"""A real worker process: deep values built up to the budgets end in a typed error, never a signal death,
and values of any depth cross the wire and the binding both ways (issue 10 point 4, issue 12 point 3)."""

from __future__ import annotations

import hashlib
import tempfile
from collections.abc import Iterator
from typing import Any, Final

import pytest
from bare_worker import BareWorker

from proto import Call, Error, Ready, Result

SOURCE = """
fn id(x) { x }
fn echo(v) { v }
fn nest(n) { let a = 7; for i in 0..n { a = [a]; } a }
fn closure_chain(n) { let f = || 0; for i in 0..n { let g = f; f = || g.call() + 1; } 0 }
fn closure_chain_unrolled(n) {
    let f = || 0;
    for i in 0..n { let a = f; let b = || a; let c = || b; let d = || c; let e = || d; f = || e; }
    0
}
fn curry_chain(n) { let f = |a, b| a; for i in 0..n { f = (|x, y| x).curry(f); } 0 }
fn fnptr_chain(n) { let f = Fn("id"); for i in 0..n { f = Fn("id").curry(Fn("id").curry(f)); } 0 }
fn nested_arrays(n) { let a = []; for i in 0..n { a = [[[[[[[[[[a]]]]]]]]]]; } 0 }
fn nested_maps(n) { let m = #{}; for i in 0..n { m = #{a: #{a: #{a: #{a: #{a: m}}}}}; } 0 }
"""
SHA = hashlib.sha256(SOURCE.encode()).hexdigest()
ATTACKS = [
    "closure_chain",
    "closure_chain_unrolled",
    "curry_chain",
    "fnptr_chain",
    "nested_arrays",
    "nested_maps",
]


QUADRATIC_DEPTH: Final = 1_025
"""Deepest value a provider builds by copying (``nest``) well within its budget's CPU charge (10 000
levels cost ~5 s of CPU: quadratic in 30 000 operations)."""


class Peer(BareWorker):
    def call(self, fn: str, args: list[Any], kind: str) -> int:
        call_id = next(self.ids)
        self.send(Call(call_id, "call", kind, SHA, fn, args, 10.0, "t", "deep.rhai", SOURCE, 2))
        return call_id


@pytest.fixture
def peer() -> Iterator[Peer]:
    with tempfile.TemporaryDirectory() as tmp:
        worker = Peer(tmp, keep_stderr=True)
        try:
            assert isinstance(worker.recv(), Ready)
            yield worker
        finally:
            worker.close()


def _depth(value: Any) -> int:
    depth = 0
    while value != 7:
        value = value[0] if isinstance(value, list) else value["k"]
        depth += 1
    return depth


@pytest.mark.timeout(900)
@pytest.mark.parametrize("kind", ["region", "provider"])
def test_every_kind_of_deep_structure_ends_in_a_limit_not_a_signal(peer: Peer, kind: str) -> None:
    for attack in ATTACKS:
        call_id = peer.call(attack, [10**9], kind)
        reply = peer.recv(timeout=120)
        assert isinstance(reply, Error) and reply.id == call_id, (attack, reply)
        # Operations or data size: where rhai's own copies make building quadratic, the CPU they cost
        # is charged to the operation budget, so no attack runs on to its deadline.
        ended = {
            ("LimitExceeded", "operations"),
            ("LimitExceeded", "data_size"),
        }
        assert (reply.cls, reply.limit) in ended, (
            attack,
            reply.cls,
            reply.message,
        )
        assert peer.proc.poll() is None, (attack, peer.proc.returncode)
    alive = peer.call("echo", [1], kind)
    assert (peer.recv().id, peer.proc.poll()) == (alive, None)


@pytest.mark.parametrize("depth", [65, 1_025, 10_000])
def test_values_of_any_depth_cross_the_wire_both_ways(peer: Peer, depth: int) -> None:
    value: Any = 7
    for i in range(depth):
        value = {"k": value, "i": i} if i % 2 else [value]
    call_id = peer.call("echo", [value], "region")
    reply = peer.recv(timeout=60)
    assert isinstance(reply, Result) and reply.id == call_id, reply
    assert _depth(reply.value) == depth
    built = peer.call("nest", [depth], "provider")
    reply = peer.recv(timeout=60)
    if depth <= QUADRATIC_DEPTH:
        assert isinstance(reply, Result) and reply.id == built, reply
        assert _depth(reply.value) == depth
    else:  # each `a = [a]` copies and size-checks the whole value: its CPU is charged to the budget
        assert isinstance(reply, Error) and (reply.cls, reply.limit) == ("LimitExceeded", "operations")
        assert peer.proc.poll() is None
