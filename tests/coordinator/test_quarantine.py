"""The quarantine circuit breaker, with time passed in (no sleeps)."""

from __future__ import annotations

from coordinator.config import RetryPolicy
from coordinator.quarantine import Quarantine


def test_strikes_within_the_window_quarantine_then_expire() -> None:
    breaker = Quarantine(RetryPolicy(strikes=3, window=60, quarantine=30))
    assert not breaker.strike("s", 0.0, "SIGABRT")
    assert not breaker.strike("s", 10.0, "SIGABRT")
    assert breaker.check("s", 10.0) is None
    assert breaker.strike("s", 20.0, "SIGSEGV")
    assert breaker.check("s", 25.0) == (50.0, "SIGSEGV")
    assert breaker.check("other", 25.0) is None
    assert breaker.check("s", 50.0) is None and len(breaker) == 0


def test_old_strikes_fall_out_of_the_window() -> None:
    breaker = Quarantine(RetryPolicy(strikes=2, window=5, quarantine=30))
    assert not breaker.strike("s", 0.0, "x")
    assert not breaker.strike("s", 10.0, "x")
    assert breaker.strike("s", 12.0, "x")
