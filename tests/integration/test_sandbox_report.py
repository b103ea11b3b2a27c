"""The sandbox report (and, with ``probe=True``, the probe results) reach the coordinator in READY."""

from __future__ import annotations

from pool_support import run

from coordinator._core.pool import Pool


def test_ready_carries_sandbox_layers_and_probe_results() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0, probe=True) as pool:
            (worker,) = pool.workers()
            assert worker.sandbox, "READY carried no sandbox report"
            for layer, state in worker.sandbox.items():
                assert isinstance(state["active"], bool) and isinstance(state["detail"], str), layer
            assert worker.probe, "probe results missing although the pool started workers with --probe"

    run(scenario())


def test_probe_results_are_absent_without_the_flag() -> None:
    async def scenario() -> None:
        async with Pool(workers=1, spares=0) as pool:
            (worker,) = pool.workers()
            assert worker.probe is None

    run(scenario())
