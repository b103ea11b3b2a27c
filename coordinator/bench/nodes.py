"""Benchmark (not a test): one local pool vs a coordinator with 2 nodes in network namespaces.

    rhaipool bench nodes [--calls 3000] [--concurrency 32] [--json]        (root; iproute2)

Same run, same machine, same worker count (2): (a) ``Pool(workers=2)``; (b) ``Pool(workers=0)`` in
namespace ``rpn-c`` with a ``NodeListener``, and two ``rhaipool node --workers 1`` in ``rpn-1``/``rpn-2``,
each behind its own veth link (``coordinator.bench.netns``).  Operations: a trivial region hook
(``open_region(...).render``) and a mock inference (``ProviderRuntime.inference`` on a provider that
answers without HTTP).  For each: p50 one call at a time (the node hop's added latency), p50 and
throughput with ``--concurrency`` callers, and CPU per call — of this process (the coordinator, and
the load generator, the same on both sides) and of the node processes with their workers.

From the coordinator's CPU per call, the calls/s one coordinator core can drive; divided by what one
node of C cores serves (C / node CPU per call), the number of such nodes before the coordinator is
the bottleneck.  On a small machine everything shares the same cores: the figures are per-call
costs, which do not depend on that, and the throughputs, which do.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import psutil

from coordinator._core.config import PoolConfig
from coordinator._core.pool import Pool
from coordinator.bench.netns import Topology, netns_unavailable
from coordinator.nodes.keys import generate
from coordinator.nodes.link import NodeListener

__all__ = ["main", "run_benchmark"]

HOOK = 'fn render(ctx) { "ok" }'
MOCK = 'fn initialize(config) { #{} }\nfn inference(state, request) { #{ content: "ok" } }'
REQUEST = {"model": "mock", "messages": [{"role": "user", "content": "hi"}]}
PORT = 47241
NODE_SIZES = (2, 8, 16)

Call = Callable[[], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Side:
    sequential_p50_ms: float
    concurrent_p50_ms: float
    throughput: float
    coordinator_cpu_ms: float
    """CPU of this process per call in the concurrent phase (coordinator + load generator)."""
    node_cpu_ms: float
    """CPU of the node processes and their workers per call (local pool: of its workers)."""


def _cpu_self() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _cpu_of(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        try:
            process = psutil.Process(pid)
            for proc in [process, *process.children(recursive=True)]:
                times = proc.cpu_times()
                total += times.user + times.system
        except psutil.Error:
            continue
    return total


def _p50(values: list[float]) -> float:
    return sorted(values)[len(values) // 2] * 1000


async def _sequential(local: Call, remote: Call, calls: int) -> tuple[float, float]:
    """p50 of one call at a time, the two sides alternating (the machine's load hits both alike)."""
    for _ in range(50):  # warm caches and workers
        await local()
        await remote()
    times: tuple[list[float], list[float]] = ([], [])
    for _ in range(min(1000, calls)):
        for side, call in enumerate((local, remote)):
            begun = time.perf_counter()
            await call()
            times[side].append(time.perf_counter() - begun)
    return _p50(times[0]), _p50(times[1])


async def _concurrent(
    call: Call, calls: int, concurrency: int, pids: list[int]
) -> tuple[float, float, float, float]:
    """(p50 ms, calls/s, this process's CPU ms per call, workers' CPU ms per call) with N callers."""
    latencies: list[float] = []
    remaining = [calls]

    async def client() -> None:
        while remaining[0] > 0:
            remaining[0] -= 1
            begun = time.perf_counter()
            await call()
            latencies.append(time.perf_counter() - begun)

    cpu0, workers0, begun = _cpu_self(), _cpu_of(pids), time.perf_counter()
    await asyncio.gather(*(client() for _ in range(concurrency)))
    elapsed = time.perf_counter() - begun
    cpu, workers = _cpu_self() - cpu0, _cpu_of(pids) - workers0
    return _p50(latencies), calls / elapsed, cpu / calls * 1000, workers / calls * 1000


async def _calls(pool: Pool, tmp: str, egress: Any) -> dict[str, Call]:
    from coordinator.providers import PoolExecutor, ProviderRuntime
    from coordinator.providers.config import parse_config
    from coordinator.regions import open_region

    region = await open_region(pool, "bench", "hook.rhai", budget=1000, base_dir=tmp)
    runtime = ProviderRuntime(PoolExecutor(pool), egress, parse_config({"providers_dir": tmp}))
    return {"hook": region.render, "inference": lambda: runtime.inference("mock", REQUEST)}


async def _compare(
    local: Pool, remote: Pool, node_pids: list[int], calls: int, concurrency: int
) -> dict[str, Any]:
    from coordinator.egress import Egress

    sides: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="rhaipool-bench-") as tmp:
        (Path(tmp) / "hook.rhai").write_text(HOOK)
        (Path(tmp) / "mock.rhai").write_text(MOCK)
        async with Egress() as egress:
            ops = (await _calls(local, tmp, egress), await _calls(remote, tmp, egress))
            for op in ("hook", "inference"):
                p50s = await _sequential(ops[0][op], ops[1][op], calls)
                pids = ([w.pid for w in local.workers()], node_pids)
                sides[op] = [
                    Side(p50s[i], *await _concurrent(ops[i][op], calls, concurrency, pids[i])) for i in (0, 1)
                ]
    return sides


async def _both(topology: Topology, keys: Path, calls: int, concurrency: int) -> dict[str, Any]:
    """Both pools in the coordinator's namespace: the local one with 2 workers, the other with 2 nodes."""
    listener = NodeListener(f"tcp://0.0.0.0:{PORT}", keys / "coordinator.key_secret", keys / "authorized")
    nodes: list[asyncio.subprocess.Process] = []
    try:
        async with (
            Pool(PoolConfig(workers=2, spares=0)) as local,
            Pool(PoolConfig(workers=0, spares=0), nodes=listener) as remote,
        ):
            for index in (1, 2):
                command = [*topology.exec_prefix(topology.node(index)), sys.executable, "-m", "coordinator",
                           "node", "--join", f"tcp://{topology.coordinator_address(index)}:{PORT}",
                           "--secret-key", str(keys / f"n{index}.key_secret"),
                           "--server-key", str(keys / "coordinator.key"),
                           "--workers", "1", "--name", f"n{index}"]  # fmt: skip
                nodes.append(
                    await asyncio.create_subprocess_exec(*command, stderr=asyncio.subprocess.DEVNULL)
                )
            deadline = time.monotonic() + 60
            while sum(w.state == "active" for w in remote.workers()) < 2:
                if time.monotonic() > deadline:
                    raise RuntimeError("the nodes did not join within 60 s")
                await asyncio.sleep(0.05)
            return await _compare(local, remote, [p.pid for p in nodes], calls, concurrency)
    finally:
        for node in nodes:
            if node.returncode is None:
                node.kill()
                await node.wait()


def _keys(root: Path) -> Path:
    (root / "authorized").mkdir()
    generate(root, "coordinator")
    for name in ("n1", "n2"):
        public, _secret = generate(root, name)
        (root / "authorized" / public.name).write_bytes(public.read_bytes())
    return root


def _drivable(side: Side) -> dict[str, float]:
    """Nodes of C cores one coordinator core can keep busy with this operation."""
    coordinator_rate = 1000 / side.coordinator_cpu_ms
    return {f"{c}-core nodes": round(coordinator_rate / (c * 1000 / side.node_cpu_ms), 1) for c in NODE_SIZES}


def run_benchmark(calls: int, concurrency: int) -> dict[str, Any]:
    why = netns_unavailable()
    if why is not None:
        raise SystemExit(f"rhaipool bench nodes: {why}")
    topology = Topology(nodes=2, prefix="rpnb")
    with tempfile.TemporaryDirectory(prefix="rhaipool-bench-keys-") as tmp:
        keys = _keys(Path(tmp))
        topology.create()
        try:
            sides = topology.run_inside(
                topology.coordinator, lambda: asyncio.run(_both(topology, keys, calls, concurrency))
            )
        finally:
            topology.destroy()
    result: dict[str, Any] = {"calls": calls, "concurrency": concurrency}
    for op in ("hook", "inference"):
        local, remote = sides[op]
        result[op] = {
            "local": asdict(local),
            "nodes": asdict(remote),
            "added_p50_ms": round(remote.sequential_p50_ms - local.sequential_p50_ms, 3),
            "coordinator_calls_per_core_second": round(1000 / remote.coordinator_cpu_ms),
            "nodes_one_coordinator_drives": _drivable(remote),
        }
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="rhaipool bench nodes", description=__doc__.split("\n")[0])
    parser.add_argument("--calls", type=int, default=3000)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    result = run_benchmark(args.calls, args.concurrency)
    if args.json:
        print(json.dumps(result, indent=2))
        return
    for op in ("hook", "inference"):
        r = result[op]
        print(f"{op}:")
        for side in ("local", "nodes"):
            s = r[side]
            print(f"  {side:6} p50 {s['sequential_p50_ms']:.3f} ms one at a time, "
                  f"{s['concurrent_p50_ms']:.2f} ms "
                  f"x{args.concurrency}, {s['throughput']:.0f} calls/s; CPU/call: coordinator "
                  f"{s['coordinator_cpu_ms']:.3f} ms, workers/nodes {s['node_cpu_ms']:.3f} ms")  # fmt: skip
        print(f"  node hop adds {r['added_p50_ms']:.3f} ms p50; one coordinator core: "
              f"{r['coordinator_calls_per_core_second']} calls/s, "
              f"drives {r['nodes_one_coordinator_drives']}")  # fmt: skip


if __name__ == "__main__":
    main()
