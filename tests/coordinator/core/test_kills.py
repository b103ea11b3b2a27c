"""The pool's kill reasons: their strings, and which of them blame the call being run."""

from __future__ import annotations

from coordinator._core.kills import KillReason


def test_only_the_pools_own_reasons_blame_a_call() -> None:
    assert {r for r in KillReason if r.blames} == {"deadline", "memory", "protocol"}
    assert not KillReason("frozen (SIGSTOP)").blames
    assert KillReason.POOL_CLOSED == "pool closed"
