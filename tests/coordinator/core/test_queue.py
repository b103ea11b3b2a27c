"""The fair queue: round robin across tenants, FIFO within one, front insertion for re-runs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from coordinator._core.queue import FairQueue


def call(tenant: str, n: int) -> Any:
    return SimpleNamespace(tenant=tenant, n=n)


def drain(queue: FairQueue) -> list[tuple[str, int]]:
    out = []
    while len(queue):
        head = next(queue.heads())
        queue.pop(head)
        out.append((head.tenant, head.n))
    return out


def test_a_flooding_tenant_cannot_starve_a_quiet_one() -> None:
    queue = FairQueue()
    for i in range(1000):
        queue.push(call("flood", i))
    queue.push(call("quiet", 0))
    order = drain(queue)
    assert order.index(("quiet", 0)) <= 2
    assert [n for t, n in order if t == "flood"] == list(range(1000))


def test_front_insertion_and_heads() -> None:
    queue = FairQueue()
    queue.push(call("a", 1))
    queue.push(call("b", 1))
    queue.push(call("b", 0), front=True)
    assert [(c.tenant, c.n) for c in queue.heads()] == [("b", 0), ("a", 1)]
    assert len(queue) == 3
    queue.clear()
    assert len(queue) == 0 and list(queue.heads()) == []


def test_a_full_queue_pushes_out_the_longest_tenants_newest_call() -> None:
    queue = FairQueue()
    for i in range(5):
        queue.push(call("flood", i))
    queue.push(call("quiet", 0))
    victim = queue.push_out_for("quiet")
    assert (victim.tenant, victim.n) == ("flood", 4) and len(queue) == 5
    queue.push(call("quiet", 1))
    assert (queue.push_out_for("quiet").tenant, len(queue)) == ("flood", 5)  # 4 flood > 2 + newcomer
    queue.push(call("quiet", 2))
    assert queue.push_out_for("quiet") is None  # 3 flood vs 3 quiet + newcomer: refuse the newcomer
    assert queue.push_out_for("flood") is None  # the same from the other side
    victim = queue.push_out_for("newcomer")  # a tie: the first tenant in rotation gives way
    assert (victim.tenant, victim.n) == ("flood", 2)
    assert sorted(drain(queue)) == [("flood", 0), ("flood", 1), ("quiet", 0), ("quiet", 1), ("quiet", 2)]


def test_put_back_lists_only_the_re_runs_still_waiting() -> None:
    queue = FairQueue()
    fresh, rerun, popped, pushed_out = call("a", 0), call("a", -1), call("b", -1), call("c", -2)
    queue.push(fresh)
    queue.push(rerun, front=True)
    queue.push(popped, front=True)
    queue.pop(popped)
    assert queue.put_back() == [rerun]
    for i in range(5):
        queue.push(call("c", i))
    queue.push(pushed_out, front=True)  # pushed out as the newest only if it sits last: it does not
    victim = queue.push_out_for("a")
    assert victim is not None and victim.n == 4 and queue.put_back() == [rerun, pushed_out]
    queue.clear()
    assert queue.put_back() == []
