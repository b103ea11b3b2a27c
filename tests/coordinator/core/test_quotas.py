"""Per-tenant CPU and loaded-script quotas, with time passed in (no sleeps, no workers)."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator._core.config import TenantQuotas
from coordinator._core.handles import ScriptHandle
from coordinator._core.quotas import CpuLedger, QuotaTable, ScriptBook
from coordinator.errors import CpuQuotaExceeded, QuotaExceeded, ScriptQuotaExceeded


def quotas(**caps: Any) -> QuotaTable:
    """Every tenant with ``caps`` (the rest uncapped)."""
    fields = dict.fromkeys(["cpu_seconds_per_minute", "max_loaded_scripts", "max_loaded_script_bytes"])
    return QuotaTable(TenantQuotas(**(fields | caps)))


def handle(n: int, size: int = 10) -> ScriptHandle:
    return ScriptHandle(f"sha{n}", f"s{n}.rhai", "region", (), "x" * size)


def test_cpu_seconds_per_minute_refuse_until_old_charges_leave_the_window() -> None:
    ledger = CpuLedger(quotas(cpu_seconds_per_minute=2.0))
    ledger.charge("t", 1.5, now=0.0)
    ledger.check("t", now=1.0)
    ledger.charge("t", 0.6, now=10.0)
    with pytest.raises(CpuQuotaExceeded) as info:
        ledger.check("t", now=11.0)
    assert (
        info.value.tenant == "t" and info.value.quota == "cpu_seconds_per_minute" and info.value.limit == 2.0
    )
    assert info.value.retry_after == pytest.approx(49.0)  # the 1.5 s charge leaves at t=60
    assert isinstance(info.value, QuotaExceeded)
    ledger.check("other", now=11.0)  # other tenants: untouched
    ledger.check("t", now=60.0)
    assert ledger.used("t", 60.0) == pytest.approx(0.6) and ledger.used("t", 70.0) == 0.0


def test_no_cpu_budget_means_no_bookkeeping() -> None:
    ledger = CpuLedger(quotas())
    ledger.charge("t", 1e9, now=0.0)
    ledger.check("t", now=0.0)
    assert ledger.used("t", 0.0) == 0.0


def test_a_tenant_over_its_script_count_forgets_its_least_recently_loaded() -> None:
    book = ScriptBook(quotas(max_loaded_scripts=2, max_loaded_script_bytes=None), cache_bytes=1 << 20)
    for n in range(3):
        book.make_room("t", ("region", f"sha{n}"), 10, busy=set())
        book.admit("t", handle(n), 10)
    assert book.held("t") == (2, 20)
    assert book.lookup(("region", "sha0"), "s0.rhai") is None  # forgotten: a later load compiles again
    assert book.lookup(("region", "sha2"), "s2.rhai") is not None


def test_scripts_with_calls_running_are_not_forgotten_and_the_load_is_refused() -> None:
    book = ScriptBook(quotas(max_loaded_scripts=2, max_loaded_script_bytes=None), cache_bytes=1 << 20)
    for n in range(2):
        book.make_room("t", ("region", f"sha{n}"), 10, busy=set())
        book.admit("t", handle(n), 10)
    busy = {("region", "sha0"), ("region", "sha1")}
    with pytest.raises(ScriptQuotaExceeded) as info:
        book.make_room("t", ("region", "sha9"), 10, busy=busy)
    assert info.value.quota == "scripts" and info.value.limit == 2
    book.make_room("t", ("region", "sha1"), 10, busy=busy)  # reloading one it holds needs no room
    book.make_room("u", ("region", "sha9"), 10, busy=set())  # another tenant has its own quota


def test_a_script_bigger_than_the_byte_quota_is_refused_before_it_is_compiled() -> None:
    book = ScriptBook(quotas(max_loaded_scripts=None, max_loaded_script_bytes=100), cache_bytes=1 << 20)
    with pytest.raises(ScriptQuotaExceeded) as info:
        book.make_room("t", ("region", "big"), 101, busy=set())
    assert info.value.quota == "script_bytes" and "101 bytes" in str(info.value)
    book.make_room("t", ("region", "a"), 60, busy=set())
    book.admit("t", handle(1, 60), 60)
    book.make_room("t", ("region", "b"), 60, busy=set())  # forgets sha1 to fit
    assert book.held("t") == (0, 0)


def test_the_source_cache_is_bounded_in_total_across_tenants() -> None:
    """Issue 10: 2 000 distinct 100 KB scripts used to stay in the coordinator forever."""
    book = ScriptBook(quotas(max_loaded_scripts=None, max_loaded_script_bytes=None), cache_bytes=1_000_000)
    for n in range(2000):
        book.admit(f"tenant-{n % 7}", handle(n, 100_000), 100_000)
    assert book.cached_bytes <= 1_000_000
    assert book.lookup(("region", "sha1999"), "s1999.rhai") is not None
    assert book.lookup(("region", "sha0"), "s0.rhai") is None
