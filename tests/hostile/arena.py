"""The arena the hostile corpus runs in: one real pool, egress, provider runtime and a quiet tenant.

One arena serves a whole test module (starting workers per script would dominate the run), on an
event loop of its own that each test drives with ``arena.run(...)``.  Every attacker runs as a
tenant of its own (``attacker-<script>``) so strikes earned by one attack cannot quarantine the next.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from coordinator._core.config import Deadlines, Limits, PoolConfig, RetryPolicy
from coordinator._core.pool import Pool
from coordinator.bench.standin import StandinServer
from coordinator.egress import Egress
from coordinator.providers.config import parse_config
from coordinator.providers.executor import PoolExecutor
from coordinator.providers.runtime import ProviderRuntime

T = TypeVar("T")

SCRIPTS = Path(__file__).parent / "scripts"
QUIET = "quiet"
QUIET_SCRIPT = "fn render(ctx) { ctx.x * 2 }"
SECRET = "hostile-secret-value-4f1c"
PLAIN = "hostile-plain-value-77ab"

CONFIG = PoolConfig(
    workers=2,
    spares=1,
    limits=Limits(memory_bytes=512 << 20, watchdog_rss_bytes=384 << 20),
    deadlines=Deadlines(kill_grace=0.3, heartbeat=0.25, shutdown_grace=0.5),
    retry=RetryPolicy(strikes=3, window=60.0, quarantine=30.0, max_retries=2),
)
ATTACK_TIMEOUT = 1.0
"""Deadline of every attacking call (short: the corpus must run in well under two minutes)."""


@dataclass(frozen=True)
class Hostile:
    """One corpus script and its header (category, attack, expected outcomes, kind, function)."""

    path: Path
    category: str
    attack: str
    expect: tuple[str, ...]
    kind: str
    call: str

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def tenant(self) -> str:
        return f"attacker-{self.name}"

    @property
    def source(self) -> str:
        return self.path.read_text()


def corpus() -> list[Hostile]:
    """Every ``scripts/*.rhai`` with its parsed header."""
    scripts = []
    for path in sorted(SCRIPTS.glob("*.rhai")):
        header: dict[str, str] = {}
        for line in path.read_text().splitlines():
            if not line.startswith("// ") or ":" not in line:
                break
            key, _, value = line[3:].partition(":")
            header[key.strip()] = value.strip()
        expect = tuple(header["expect"].split("|"))
        scripts.append(
            Hostile(path, header["category"], header["attack"], expect, header["kind"], header["call"])
        )
    return scripts


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


class Arena:
    """A started pool + egress + provider runtime on a private event loop."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop_errors: list[dict[str, Any]] = []
        self.loop.set_exception_handler(lambda _loop, ctx: self.loop_errors.append(ctx))
        self.server = StandinServer().start()
        os.environ["RHAIPOOL_HOSTILE_SECRET_KEY"] = SECRET
        os.environ["RHAIPOOL_HOSTILE_TOKEN"] = SECRET
        os.environ["RHAIPOOL_HOSTILE_PLAIN"] = PLAIN
        self.pool = Pool(CONFIG)
        self.egress = Egress()
        self.run(self._start())

    async def _start(self) -> None:
        await self.pool.__aenter__()
        await self.egress.__aenter__()
        providers = {
            h.name: {"script": str(h.path), "base_url": self.server.base_url, "egress_allow": ["127.0.0.1"]}
            for h in corpus()
            if h.kind == "provider"
        }
        config = parse_config({"providers_dir": str(SCRIPTS), "tenants": True, "model_providers": providers})
        self.runtime = ProviderRuntime(PoolExecutor(self.pool), self.egress, config)
        self.quiet = await self.pool.load(QUIET_SCRIPT, name="quiet.rhai", tenant=QUIET)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float = 60.0) -> T:
        async def bounded() -> T:
            async with asyncio.timeout(timeout):
                return await coro

        return self.loop.run_until_complete(bounded())

    async def quiet_call(self, x: int) -> float:
        """One quiet-tenant call; its latency in seconds (any failure propagates and fails the test)."""
        started = time.perf_counter()
        value = await self.pool.call(self.quiet, "render", {"x": x}, tenant=QUIET, timeout=10.0)
        assert value == 2 * x
        return time.perf_counter() - started

    async def baseline(self, samples: int = 40) -> float:
        """The quiet tenant's p99 with nothing else running (same test, same machine load)."""
        return p99([await self.quiet_call(i) for i in range(samples)])

    def close(self) -> None:
        async def stop() -> None:
            await self.egress.__aexit__(None, None, None)
            await self.pool.aclose()

        self.run(stop())
        self.loop.close()
        self.server.stop()
        for name in ("RHAIPOOL_HOSTILE_SECRET_KEY", "RHAIPOOL_HOSTILE_TOKEN", "RHAIPOOL_HOSTILE_PLAIN"):
            os.environ.pop(name, None)


def latency_bound(baseline: float) -> float:
    """p99 under attack may be 3× the baseline, with a 250 ms floor (a loaded 2-core machine)."""
    return max(3 * baseline, baseline + 0.25)


def median(samples: list[float]) -> float:
    return statistics.median(samples)
