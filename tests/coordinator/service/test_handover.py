"""The hand-over book (coordinator/service/handover.py) on its own: which runs of forwarded requests
move a tenant, what restarts a run, the hold after a hand-over, and the forward's proof. The processes
that act on it are tested in test_coordinators_handover.py."""

from __future__ import annotations

import asyncio
import time

from coordinator.service.handover import HOLD_LEASES, PROOF_HEADER, RUN, Handovers

LEASE = 0.06  # a third of it: 20 ms


def _book(key: bytes = b"k" * 32) -> Handovers:
    return Handovers(key, "owner", LEASE)


def _run(book: Handovers, tenant: str, by: str | None, count: int, over: float) -> list[bool]:
    out = []
    for _ in range(count):
        out.append(book.note(tenant, by))
        time.sleep(over / count)
    return out


def test_a_run_of_forwards_from_one_coordinator_over_a_third_of_a_lease_moves_the_tenant() -> None:
    book = _book()
    answers = _run(book, "acme", "b", RUN, LEASE / 3 + 0.01)
    assert answers[:-1] == [False] * (RUN - 1)
    if not answers[-1]:  # the last one came just before a third of a lease had passed
        time.sleep(LEASE / 3)
        assert book.note("acme", "b")
    assert not book.note("acme", "b"), "a new run starts after a hand-over"


def test_fast_forwards_do_not_move_a_tenant_before_a_third_of_a_lease() -> None:
    book = _book()
    assert not any(book.note("acme", "b") for _ in range(RUN * 10))  # all within a few microseconds
    time.sleep(LEASE / 3)
    assert book.note("acme", "b")


def test_a_request_sent_directly_or_from_another_coordinator_restarts_the_run() -> None:
    book = _book()
    for breaker in (None, "c"):  # round robin: the owner also gets the tenant's requests itself
        _run(book, "acme", "b", RUN - 1, LEASE)
        assert not book.note("acme", breaker)
        assert not any(_run(book, "acme", "b", RUN - 1, LEASE / 2))
        _run(book, "acme", None, 1, 0)
    assert not book.note("globex", "b"), "runs are per tenant"


def test_a_tenant_received_by_a_hand_over_is_held_then_can_move_again() -> None:
    book = _book()
    book.hold("acme")
    held_until = time.monotonic() + HOLD_LEASES * LEASE
    while time.monotonic() < held_until - 0.05:
        assert not book.note("acme", "b")
        time.sleep(0.005)
    time.sleep(0.06)
    assert any(_run(book, "acme", "b", RUN + 2, LEASE))


def test_a_forward_counts_only_with_the_proof_of_the_shared_key() -> None:
    book, other = _book(), _book(b"x" * 32)
    proof = book.sign("b").encode()
    assert book.forwarder([(PROOF_HEADER, proof)], b"b") == "b"
    assert book.forwarder([(PROOF_HEADER, proof)], b"b") == "b"  # remembered, still checked
    assert book.forwarder([], b"b") is None  # a client writing rhaipool-forwarded-by itself
    assert book.forwarder([(PROOF_HEADER, proof)], b"c") is None  # another id, the same proof
    assert book.forwarder([(PROOF_HEADER, other.sign("b").encode())], b"b") is None  # another key
    assert book.forwarder([(PROOF_HEADER, b"0" * 64)], b"b") is None


def test_requests_wait_for_a_hand_over_and_the_old_owner_leaves_the_lease_for_a_moment() -> None:
    async def main() -> None:
        book = _book()
        book.begin("acme")
        assert book.moving("acme") and not book.moving("globex")
        waiter = asyncio.create_task(book.wait("acme"))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        book.released("acme", 7)
        book.end("acme")
        await asyncio.wait_for(waiter, 1)
        assert not book.moving("acme")
        released = book.just_released("acme")
        assert released is not None and released.epoch == 7
        await book.wait("acme")  # none under way: at once

    asyncio.run(main())
