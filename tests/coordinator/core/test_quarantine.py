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


def test_strikes_count_per_tenant_so_editing_the_script_does_not_reset_them() -> None:
    """Issue 10: ``// variant N`` appended to each copy changed the sha256 and evaded the breaker."""
    breaker = Quarantine(RetryPolicy(strikes=3, window=60, quarantine=30), tenant_strikes=4)
    for n in range(3):
        assert not breaker.strike(f"variant-{n}", float(n), "SIGSEGV", tenant="attacker")
        assert breaker.check(f"variant-{n}", float(n), tenant="attacker") is None
    assert breaker.strike("variant-3", 3.0, "SIGSEGV(-11)", tenant="attacker")
    until, cause = breaker.check("never-seen", 4.0, tenant="attacker") or (0.0, "")
    assert until == 33.0 and "attacker" in cause and "SIGSEGV(-11)" in cause
    assert breaker.check("variant-0", 4.0, tenant="quiet") is None  # other tenants: untouched
    assert breaker.check("never-seen", 33.0, tenant="attacker") is None and len(breaker) == 0


def test_a_script_is_quarantined_only_for_the_tenant_whose_calls_crashed() -> None:
    """A tenant feeding hostile input to a shared script must not get it quarantined for everyone."""
    breaker = Quarantine(RetryPolicy(strikes=2, window=60, quarantine=30))
    assert not breaker.strike("popular", 0.0, "SIGABRT", tenant="attacker")
    assert breaker.strike("popular", 1.0, "SIGABRT", tenant="attacker")
    assert breaker.check("popular", 2.0, tenant="attacker") == (31.0, "SIGABRT")
    assert breaker.check("popular", 2.0, tenant="quiet") is None
    assert breaker.check("other", 2.0, tenant="attacker") is None  # 2 < 2 × strikes: the tenant is not out


def test_an_offender_runs_apart_until_clean_for_a_window() -> None:
    breaker = Quarantine(RetryPolicy(strikes=3, window=10, quarantine=30))
    assert not breaker.offender("t", 0.0)
    breaker.strike("s", 0.0, "SIGSEGV", tenant="t")
    assert breaker.offender("t", 9.9) and not breaker.offender("u", 5.0) and breaker.offenders == 1
    breaker.strike("s", 5.0, "SIGSEGV", tenant="t")  # a new crash: the clean period starts over
    assert breaker.offender("t", 14.9)
    assert not breaker.offender("t", 15.0) and breaker.offenders == 0


def test_bookkeeping_is_pruned_once_strikes_leave_the_window() -> None:
    breaker = Quarantine(RetryPolicy(strikes=3, window=10, quarantine=30))
    for n in range(1000):
        breaker.strike(f"script-{n}", float(n % 5), "x", tenant=f"tenant-{n}")
    breaker.prune(100.0)
    assert breaker._scripts._strikes == {} and breaker._tenants._strikes == {} and breaker.offenders == 0
