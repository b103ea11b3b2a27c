"""The blocking facade drives a real pool from plain synchronous code."""

from __future__ import annotations

import pytest

from coordinator._core.sync import SyncPool
from coordinator.errors import CompileError, ScriptError


def test_sync_facade_loads_calls_and_closes() -> None:
    with SyncPool(workers=1, spares=0) as pool:
        handle = pool.load("fn render(ctx) { ctx.n + 1 }\nfn boom() { throw 3 }", name="r.rhai")
        assert pool.call(handle, "render", {"n": 41}) == 42
        assert pool.call_detailed(handle, "render", {"n": 1}).value == 2
        with pytest.raises(ScriptError) as info:
            pool.call(handle, "boom")
        assert info.value.value == 3
        with pytest.raises(CompileError):
            pool.load("fn (", name="bad.rhai")
        assert pool.statistics().calls_ok >= 2
