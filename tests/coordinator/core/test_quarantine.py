"""The quarantine circuit breaker and the suspects list, with time passed in (no sleeps)."""

from __future__ import annotations

from coordinator._core.config import RetryPolicy
from coordinator._core.isolation import CLEAR_AFTER, Suspects
from coordinator._core.quarantine import Quarantine


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


def test_suspects_run_alone_until_cleared_or_the_window_passes() -> None:
    suspects = Suspects(window=60)
    assert not suspects.isolate("s", 0.0)
    suspects.suspect("s", 0.0)
    suspects.suspect("t", 0.0)
    assert suspects.isolate("s", 1.0) and suspects.isolate("t", 1.0) and len(suspects) == 2
    for _ in range(CLEAR_AFTER - 1):
        suspects.finished_alone("s")
    assert suspects.isolate("s", 2.0)
    suspects.suspect("s", 3.0)  # suspected again: the clean count starts over
    for _ in range(CLEAR_AFTER - 1):
        suspects.finished_alone("s")
    assert suspects.isolate("s", 4.0)
    suspects.finished_alone("s")
    assert not suspects.isolate("s", 4.0)
    suspects.finished_alone("never-suspected")
    assert suspects.isolate("t", 59.0) and not suspects.isolate("t", 60.0) and len(suspects) == 0
