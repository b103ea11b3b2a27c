"""A hostile tenant's first crash costs a quiet tenant's provider calls nothing (issue 10 point 3).

The quiet tenant's inferences wait on a slow upstream (a stand-in API on 127.0.0.1 that answers only
when the test opens its gate) in the one shared worker; the attacker's memory bomb kills that worker.
Every quiet call is re-run elsewhere and served its request from its journal: each succeeds, and the
upstream received each quiet request exactly once (nothing billed twice).
"""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import pytest
from pool_support import run

from coordinator._core.config import Limits, PoolConfig, RetryPolicy
from coordinator._core.pool import Pool
from coordinator.bench.standin import Reply, Request, StandinServer
from coordinator.egress import Egress
from coordinator.errors import LimitExceeded
from coordinator.providers.config import parse_config
from coordinator.providers.executor import PoolExecutor
from coordinator.providers.runtime import ProviderRuntime

QUIET_PROVIDER = """
fn initialize(config) { config }
fn inference(state, request) {
    #{ content: http_post(`${state.base_url}/slow`, request.messages[0].content, #{}) }
}
"""
BOMB = """
fn render(ctx) { 0 }
fn bomb() {
    let m = #{}; let s = "y"; while s.len < 500000 { s += s; }
    let i = 0; loop { m[s + i.to_string()] = i; i += 1; }
}
"""
QUIET_CALLS = 6


class SlowUpstream:
    """``POST /v1/slow`` answers ``echo: <body>`` once the gate opens; every request is recorded."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.server = StandinServer()
        self.server.route("POST", "/v1/slow", self._answer)

    def _answer(self, request: Request) -> Reply:
        self.gate.wait(30)
        return Reply(200, body=b"echo: " + request.body)

    def bodies(self) -> list[str]:
        return sorted(r.body.decode() for r in self.server.requests if r.path == "/v1/slow")


async def until(predicate: object, what: str) -> None:
    for _ in range(3000):
        if predicate():  # type: ignore[operator]
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


def test_a_hostile_crash_costs_quiet_provider_calls_waiting_on_http_nothing(tmp_path: Path) -> None:
    (tmp_path / "quiet.rhai").write_text(QUIET_PROVIDER)
    upstream = SlowUpstream()
    upstream.server.start()

    async def scenario() -> None:
        config = PoolConfig(
            workers=1,
            spares=1,
            limits=Limits(memory_bytes=512 << 20),
            retry=RetryPolicy(strikes=3, window=60.0, quarantine=30.0, max_retries=2),
        )
        providers = {
            "quiet": {
                "script": "quiet.rhai",
                "base_url": upstream.server.base_url,
                "egress_allow": ["127.0.0.1"],
            }
        }
        async with Pool(config) as pool, Egress() as egress:
            runtime = ProviderRuntime(
                PoolExecutor(pool),
                egress,
                parse_config({"providers_dir": str(tmp_path), "model_providers": providers}),
            )
            killer = await pool.load(BOMB, name="bomb.rhai", tenant="attacker")
            requests = [
                {"model": "m", "messages": [{"role": "user", "content": f"question {i}"}]}
                for i in range(QUIET_CALLS)
            ]
            quiet = [asyncio.ensure_future(runtime.inference("quiet", r, tenant="quiet")) for r in requests]
            await until(
                lambda: len(upstream.bodies()) == QUIET_CALLS, "every quiet request reached the upstream"
            )
            (shared,) = [w for w in pool.workers() if w.running]
            assert len(shared.running) == QUIET_CALLS  # all waiting on HTTP in the one worker
            with pytest.raises(LimitExceeded):
                await pool.call(killer, "bomb", tenant="attacker", timeout=30)
            await until(lambda: pool.statistics().retries >= QUIET_CALLS, "every quiet call re-run")
            upstream.gate.set()
            answers = await asyncio.gather(*quiet)
            assert [a.content for a in answers] == [f"echo: question {i}" for i in range(QUIET_CALLS)]
            assert upstream.bodies() == [f"question {i}" for i in range(QUIET_CALLS)]  # each sent once
            stats = pool.statistics()  # the bomb's own death may be re-run once too (blamed only alone)
            assert stats.exits >= 1 and stats.calls_failed == 1 and stats.retries >= QUIET_CALLS

    try:
        run(scenario(), timeout=120)
    finally:
        upstream.gate.set()
        upstream.server.stop()
