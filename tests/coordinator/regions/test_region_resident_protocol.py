"""The coordinator's resident bookkeeping against the worker's real store, without processes.

Random edits, random routing over three workers, lost stores (worker deaths),
tiny store bounds, calls prepared but never sent and CALLs lost before the
worker applied them: every list the worker hands the hook must encode to the
same bytes as the list the ctx carried.
"""

from __future__ import annotations

import random
from typing import Any

import msgpack
import pytest

from coordinator.regions.resident import ResidentCall, ResidentEntries
from proto import Call, decode, encode
from worker.engine import ScriptFailure
from worker.resident import ResidentStore

SHA = "ef" * 32
WORKERS = ("A", "B", "C")


def deliver(call: ResidentCall, worker: str, store: ResidentStore, tenant: str) -> list[Any] | None:
    """One CALL through the real codec and store; ``None`` when the worker answered ResidentMissing."""
    message = Call(
        1, "call", "region", SHA, "render", [{"entries": []}], 1.0, tenant, resident=call.wire(worker)
    )
    received = decode(encode(message))
    assert received.resident is not None
    try:
        args = store.args_for(received.tenant, received.resident, received.args)
    except ScriptFailure as failure:
        assert failure.cls == "ResidentMissing"
        return None
    return list(args[0]["entries"])


def edit(rng: random.Random, entries: list[Any], step: int) -> list[Any]:
    roll = rng.random()
    if roll < 0.5:
        return [*entries, {"content": f"e{step}", "n": rng.choice([1, 1.0, True, step])}]
    if roll < 0.65 and entries:
        return entries[rng.randint(1, len(entries)) :]
    if roll < 0.8 and entries:
        gone = set(rng.sample(range(len(entries)), rng.randint(1, len(entries))))
        return [e for k, e in enumerate(entries) if k not in gone]
    if roll < 0.85:
        return []
    if roll < 0.9 and entries:  # equal values, new objects, other types: must not be taken as unchanged
        return [dict(e, n=float(e["n"]) if type(e["n"]) is int else e["n"]) for e in entries]
    return entries


@pytest.mark.parametrize("seed", range(30))
def test_random_routing_losses_and_bounds_stay_byte_identical(seed: int) -> None:
    rng = random.Random(seed)
    bound = rng.choice([1, 2, 256])

    def fresh() -> ResidentStore:
        return ResidentStore(max_keys=bound, max_bytes=rng.choice([300, 2000, 1 << 20]))

    stores = {worker: fresh() for worker in WORKERS}
    regions = [(ResidentEntries(), rng.choice(["acme", "globex"])) for _ in range(3)]
    lists: list[list[Any]] = [[] for _ in regions]
    for step in range(300):
        n = rng.randrange(len(regions))
        state, tenant = regions[n]
        lists[n] = edit(rng, lists[n], step)
        call = state.prepare(list(lists[n]))
        if rng.random() < 0.05:
            continue  # prepared, never sent (the queue was full)
        worker = rng.choice(WORKERS)
        if rng.random() < 0.05:
            stores[worker] = fresh()  # the worker died: its store is gone
        if rng.random() < 0.05:
            call.wire(worker)  # sent, but lost before the worker applied it
            worker = rng.choice(WORKERS)
        got = deliver(call, worker, stores[worker], tenant)
        if got is None:
            assert call.lost(worker)  # a delta was refused: resending whole must help, and does
            got = deliver(call, worker, stores[worker], tenant)
        assert got is not None
        assert msgpack.packb(got) == msgpack.packb(lists[n]), (seed, step)
    assert sum(state.sent_delta for state, _ in regions) > 100


def test_a_whole_list_refused_is_a_failure_not_a_loop() -> None:
    state = ResidentEntries()
    call = state.prepare([{"content": "x"}])
    assert call.wire("A")["base"] is None
    assert not call.lost("A")  # only a lying worker refuses a whole list: no resend
    assert call.wire("A")["base"] is None  # and it is no longer believed to hold anything
