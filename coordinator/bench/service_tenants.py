"""Benchmark (not a test): a quiet tenant's latency through ``rhaipool serve``, alone and beside each of a
hostile tenant's attacks (issue 22), every figure against the quiet tenant's baseline of the same run.

Tenant B renders a small persistent region and runs inferences of the seed's ``groq.rhai`` against a
stand-in API on 127.0.0.1 (the operator's table, granted), one call after another. Tenant A attacks
from a child process (so its work does not take the measuring process's GIL) and from its own client
address (127.0.0.2): a flood of CPU-heavy renders, memory-bomb hooks, 200 × 1 MB writes,
1 MB writes into a persistent region holding 60 MB, 100 × 100 KiB script PUTs, 2 000 regions,
200 silent connections, 1 100 silent sockets from 17 addresses (more than the service's descriptors
hold: it runs at a 1 024 descriptor limit, as issue 22 measured), a 150 000-deep nested array from a
provider, closure chains sent while 32 slow provider calls hold their workers' stacks, and malformed
bodies. For each: B's p50 and p99 and their ratios to the baseline, B's failed calls, what A's
requests were answered (and, for the big region, how long A's writes took once it was full), and the
coordinator's peak RSS, descriptors and database size. Run with::

    python -m coordinator.bench.service_tenants [--seconds 4] [--workers 2] [--only NAME] [--json]

Past 400 lines: one phase per attack, each a few lines, plus the shared measurement and report.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psutil

from coordinator._cli.demo import GROQ_SCRIPT
from coordinator.bench.measure import free_port, load_average, percentile_ms
from coordinator.bench.standin import StandinServer
from coordinator.service.auth import token_sha256

__all__ = ["ATTACKS", "main", "run_benchmark"]

QUIET_TOKEN = "bench-quiet-token"
ATTACKER_ADDRESS = "127.0.0.2"
MB = 1 << 20
B_HOOK = 'fn render(ctx) { ctx.entries.map(|e| e.content).reduce(|a, b| a + "|" + b, "") }'
PONG = {"model": "standin-small", "messages": [{"role": "user", "content": "Reply with exactly: PONG"}]}
SERVE = """
max_body_bytes = 2097152
header_timeout_secs = 2
idle_timeout_secs = 5
max_connections_per_address = 64
"""
DEFAULTS = """
max_regions = 2000
max_entry_bytes = 8388608
max_scripts = 64
max_script_bytes = 2097152
provider_call_secs = 5
"""
"""Bounds small enough that every attack reaches its quota within the run."""
OWN_QUOTAS = {"big region writes": "max_entry_bytes = 67108864\n"}
"""An attack's tenant's own quotas on top of the defaults: the big region's tenant may hold the service's
default 64 MiB of entries, enough for the ~60 MB region issue 22 wrote into."""
NOFILE = 1024
"""The service's descriptor limit (RLIMIT_NOFILE), a common default and issue 22's condition."""
Figures = dict[str, float] | None
"""What an attack measured of its own requests besides their statuses (None: nothing)."""


# -- tenant A's attacks, each run in a child process for about ``seconds`` ---------------------------


def attacker_token(name: str) -> str:
    """Each attack is a tenant of its own (``a0``, ``a1``, …), so one's quotas are full for it alone."""
    return f"bench-attacker-token-{list(ATTACKS).index(name)}"


def _client(url: str) -> httpx.Client:
    transport = httpx.HTTPTransport(local_address=ATTACKER_ADDRESS)
    token = os.environ["RHAIPOOL_BENCH_ATTACKER_TOKEN"]
    return httpx.Client(
        base_url=url, transport=transport, timeout=60.0, headers={"Authorization": f"Bearer {token}"}
    )


def _region(http: httpx.Client, name: str, hook: str, **options: Any) -> None:
    http.put(f"/api/scripts/region_hook/{name}", json={"content": hook})
    http.post("/api/regions", json={"name": name, "script": name, "budget": 100_000, **options})


def _until(seconds: float) -> Callable[[], bool]:
    end = time.monotonic() + seconds
    return lambda: time.monotonic() < end


def render_flood(url: str, seconds: float, seen: Counter[int]) -> None:
    """Four connections rendering a hook that spends its whole operation budget."""
    with _client(url) as http:
        _region(http, "spin", "fn render(ctx) { let n = 0; for i in 0..400000 { n += i; } `${n}` }")

    def one() -> None:
        with _client(url) as own:
            going = _until(seconds)
            while going():
                seen[own.post("/api/regions/spin/render", json={}).status_code] += 1

    threads = [threading.Thread(target=one) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def memory_bombs(url: str, seconds: float, seen: Counter[int]) -> None:
    """Renders of a hook that grows an array of blobs until a limit stops it, one after another."""
    with _client(url) as http:
        _region(http, "bomb", "fn render(ctx) { let a = []; loop { a.push(blob(100000)); } }")
        going = _until(seconds)
        while going():
            seen[http.post("/api/regions/bomb/render", json={}).status_code] += 1


def writes_1mb(url: str, seconds: float, seen: Counter[int]) -> None:
    """200 writes of 1 MB into one persistent region (the entry quota refuses past it)."""
    body = json.dumps({"content": "m" * 1_000_000, "tokens": 1}).encode()
    with _client(url) as http:
        _region(http, "hoard", B_HOOK, persistent=True)
        for _ in range(200):
            r = http.post(
                "/api/regions/hoard/write", content=body, headers={"Content-Type": "application/json"}
            )
            seen[r.status_code] += 1


BIG_REGION_ENTRIES = 60


def big_region_writes(url: str, seconds: float, seen: Counter[int]) -> Figures:
    """1 MB writes into a persistent region whose budget keeps 60 of them (~60 MB): past them each write
    drops the oldest entry. Unbounded, a write re-serialised the whole region (2.7 s at ~72 MB); A's
    write time once the region is full is reported (``full_write_p50_ms``, ``full_write_max_ms``)."""
    body = json.dumps({"content": "m" * 1_000_000, "tokens": 1}).encode()
    full: list[float] = []
    with _client(url) as http:
        _region(http, "archive", B_HOOK, persistent=True, budget=BIG_REGION_ENTRIES)
        going = _until(seconds)
        written = 0
        while going() or len(full) < 20:
            started = time.perf_counter()
            r = http.post(
                "/api/regions/archive/write", content=body, headers={"Content-Type": "application/json"}
            )
            seen[r.status_code] += 1
            if r.status_code != 200:
                break
            written += 1
            if written > BIG_REGION_ENTRIES:
                full.append(time.perf_counter() - started)
    if not full:
        return None
    return {"full_write_p50_ms": percentile_ms(full, 0.5), "full_write_max_ms": max(full) * 1000}


def script_puts(url: str, seconds: float, seen: Counter[int]) -> None:
    """100 PUTs of 100 KiB scripts (the script quotas refuse past them)."""
    big = "// " + "s" * (100 << 10)
    with _client(url) as http:
        for i in range(100):
            seen[http.put(f"/api/scripts/region_hook/bulk{i}", json={"content": big}).status_code] += 1


def many_regions(url: str, seconds: float, seen: Counter[int]) -> None:
    """2 000 regions (the region quota), then some refused."""
    with _client(url) as http:
        http.put("/api/scripts/region_hook/plain", json={"content": B_HOOK})
        for i in range(2100):
            seen[
                http.post("/api/regions", json={"name": f"r{i}", "script": "plain", "budget": 10}).status_code
            ] += 1


def _held_until_answered(
    opened: list[socket.socket], going: Callable[[], bool], seen: Counter[int], pause: float = 0.0
) -> None:
    """Wait on silent sockets until the service answers or closes each (its status counted, 0 for a
    close), or time runs out (``seen[-1]``: still held); then close them all."""
    while going() and opened:
        for s in list(opened):
            try:
                got = s.recv(64)
            except (TimeoutError, BlockingIOError):  # nothing yet
                continue
            except OSError:
                got = b""
            seen[int(got[9:12]) if got.startswith(b"HTTP/1.1 ") else 0] += 1
            opened.remove(s)
            s.close()
        time.sleep(pause)
    seen[-1] += len(opened)  # still held by the service when the attack ended
    for s in opened:
        s.close()


def silent_connections(url: str, seconds: float, seen: Counter[int]) -> None:
    """200 connections that never send a byte, held until the service closes them."""
    port = int(url.rsplit(":", 1)[1])
    opened = []
    for _ in range(200):
        s = socket.socket()
        s.bind((ATTACKER_ADDRESS, 0))
        s.connect(("127.0.0.1", port))
        s.settimeout(0.05)
        opened.append(s)
    _held_until_answered(opened, _until(seconds), seen)


def many_silent_sockets(url: str, seconds: float, seen: Counter[int]) -> None:
    """1 100 sockets that never send a byte, 65 from each of 17 addresses (127.0.0.2 to .18): one over
    each address's cap, and more in all than the service's 1 024 descriptors less its reserve."""
    port = int(url.rsplit(":", 1)[1])
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))  # this process holds them all
    opened = []
    for i in range(1100):
        s = socket.socket()
        s.bind((f"127.0.0.{2 + i % 17}", 0))
        s.settimeout(5.0)
        try:
            s.connect(("127.0.0.1", port))
        except OSError:
            seen[0] += 1  # not even connected
            s.close()
            continue
        s.setblocking(False)
        opened.append(s)
    # the bench's 2 s header timeout, the sweep and a loaded machine
    _held_until_answered(opened, _until(max(seconds, 5.0)), seen, pause=0.05)


def deep_provider(url: str, seconds: float, seen: Counter[int]) -> None:
    """Inferences of a provider script that nests an array 150 000 deep (quadratic copies)."""
    deep = (
        "fn initialize(config) { #{} }\n"
        "fn inference(state, request) { let a = []; for i in 0..150000 { a = [a]; } #{ content: `x` } }"
    )
    with _client(url) as http:
        http.put("/api/scripts/provider/deep", json={"content": deep})
        going = _until(seconds)
        while going():
            seen[http.post("/api/providers/deep/inference", json=PONG).status_code] += 1


NAPPER = "fn initialize(config) { #{} }\nfn inference(state, request) { sleep(2); #{ content: `rested` } }"
CHAIN = (
    "fn initialize(config) { #{} }\nfn inference(state, request) {\n"
    "    let f = || 0; for i in 0..90000 { let g = f; f = || g.call() + 1; } #{ content: `${f.call()}` }\n}"
)


def closure_chain(url: str, seconds: float, seen: Counter[int]) -> None:
    """32 provider calls that each sleep 2 s, held again as each ends (on two workers: 16 or so on
    each, holding their stacks), and meanwhile closure chains 90 000 deep, one after another. Unbounded,
    a chain got the 8 MiB floor stack and SIGSEGVed its worker (B's inference p99 179 → 7 011 ms)."""
    clients = [_client(url) for _ in range(33)]  # made first: making 33 takes a loaded machine seconds
    clients[0].put("/api/scripts/provider/napper", json={"content": NAPPER})
    clients[0].put("/api/scripts/provider/chain", json={"content": CHAIN})
    going = _until(seconds)
    lock = threading.Lock()

    def post(client: httpx.Client, provider: str) -> None:
        status = client.post(f"/api/providers/{provider}/inference", json=PONG).status_code
        with lock:
            seen[status] += 1

    def hold(client: httpx.Client) -> None:
        while going():
            post(client, "napper")

    holders = [threading.Thread(target=hold, args=(client,)) for client in clients[1:]]
    try:
        for t in holders:
            t.start()
        time.sleep(0.5)
        while going():
            post(clients[0], "chain")
        for t in holders:
            t.join()
    finally:
        for client in clients:
            client.close()


def bad_bodies(url: str, seconds: float, seen: Counter[int]) -> None:
    """Malformed bodies in turn: deep JSON, non-finite numbers, lone surrogates, wrong shapes."""
    bodies = [
        b'{"content": "x", "key": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
        b'{"content": "x", "timestamp": Infinity}',
        b'{"content": "x", "tool_calls": [1]}',
        b'{"content": "a\\ud800b"}',
        b'{"content": "x", "tokens": -1}',
    ]
    headers = {"Content-Type": "application/json"}
    with _client(url) as http:
        _region(http, "target", B_HOOK)
        going = _until(seconds)
        i = 0
        while going():
            seen[
                http.post(
                    "/api/regions/target/write", content=bodies[i % len(bodies)], headers=headers
                ).status_code
            ] += 1
            i += 1


ATTACKS: dict[str, Callable[[str, float, Counter[int]], Figures]] = {
    "render flood": render_flood,
    "memory bombs": memory_bombs,
    "200 x 1 MB writes": writes_1mb,
    "big region writes": big_region_writes,
    "script PUTs": script_puts,
    "2 000 regions": many_regions,
    "silent connections": silent_connections,
    "1 100 silent sockets": many_silent_sockets,
    "deep-array provider": deep_provider,
    "closure chain": closure_chain,
    "malformed bodies": bad_bodies,
}


def _attack_main(name: str, url: str, seconds: float) -> None:
    seen: Counter[int] = Counter()
    figures: Figures = None
    try:
        figures = ATTACKS[name](url, seconds, seen)
    except httpx.HTTPError as exc:
        seen[0] += 1
        print(f"attack {name}: {type(exc).__name__}: {exc}", file=sys.stderr)
    statuses = {str(k): v for k, v in sorted(seen.items())}
    print(json.dumps({"statuses": statuses, "figures": figures}), flush=True)


# -- the service and tenant B --------------------------------------------------------------------------


def _descriptor_limit() -> None:
    """In the service's process before it starts: RLIMIT_NOFILE :data:`NOFILE` (its hard limit if lower)."""
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    limit = NOFILE if hard == resource.RLIM_INFINITY else min(NOFILE, hard)
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, hard))


def _start(folder: Path, workers: int, standin: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    tokens = {"b": QUIET_TOKEN} | {f"a{i}": attacker_token(name) for i, name in enumerate(ATTACKS)}
    own = {f"a{i}": OWN_QUOTAS.get(name, "") for i, name in enumerate(ATTACKS)}
    tenants = "".join(
        f'[tenants.{t}]\ntoken_sha256 = "{token_sha256(token)}"\nproviders = ["groq"]\n{own.get(t, "")}'
        for t, token in tokens.items()
    )
    groq = f'[model_providers.groq]\napi_key = "bench-key"\nbase_url = "{standin}"\n'
    groq += 'egress_allow = ["127.0.0.1"]\n'
    (folder / "serve.toml").write_text(
        f'[serve]\nlisten = "127.0.0.1:{port}"\ndatabase = "bench.db"\nworkers = {workers}\n{SERVE}'
        f"[serve.tenant_defaults]\n{DEFAULTS}{tenants}{groq}"
    )
    process = subprocess.Popen(
        [sys.executable, "-m", "coordinator", "serve", "--config", str(folder / "serve.toml")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=folder, preexec_fn=_descriptor_limit,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    for _ in range(1200):
        try:
            if httpx.get(url + "/readyz").status_code == 200:
                return process, url
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    process.kill()
    raise RuntimeError("rhaipool serve did not become ready")


class Quiet:
    """Tenant B: a render and an inference in turn, one call at a time."""

    def __init__(self, url: str) -> None:
        self.http = httpx.Client(
            base_url=url, timeout=60.0, headers={"Authorization": f"Bearer {QUIET_TOKEN}"}
        )
        region = {"name": "journal", "script": "journal", "budget": 1000, "persistent": True}
        for r in (
            self.http.put("/api/scripts/region_hook/journal", json={"content": B_HOOK}),
            self.http.put(
                "/api/scripts/provider/groq", json={"content": GROQ_SCRIPT.read_text(encoding="utf-8")}
            ),
            self.http.post("/api/regions", json=region),
        ):
            r.raise_for_status()
        for i in range(5):
            self.http.post(
                "/api/regions/journal/write", json={"content": f"note {i}", "tokens": 5}
            ).raise_for_status()
        self.turn = 0

    def call(self) -> tuple[float, bool]:
        """One call: its latency and whether it was answered as it should be."""
        started = time.perf_counter()
        try:
            if self.turn % 2 == 0:
                r = self.http.post("/api/regions/journal/render", json={})
                ok = r.status_code == 200 and r.json()["fallback"] is False
            else:
                r = self.http.post("/api/providers/groq/inference", json=PONG)
                ok = r.status_code == 200 and r.json()["content"] == "PONG"
        except httpx.HTTPError:
            ok = False
        self.turn += 1
        return time.perf_counter() - started, ok

    def measure(self, going: Callable[[], bool], at_least: int) -> dict[str, Any]:
        latencies: list[float] = []
        failed = 0
        while going() or len(latencies) < at_least:
            latency, ok = self.call()
            latencies.append(latency)
            failed += not ok
            time.sleep(0.002)
        return {
            "calls": len(latencies),
            "failed": failed,
            "p50_ms": percentile_ms(latencies, 0.5),
            "p99_ms": percentile_ms(latencies, 0.99),
        }


def _usage(pid: int, database: Path) -> tuple[int, int, int]:
    process = psutil.Process(pid)
    disk = sum(p.stat().st_size for p in database.parent.glob(database.name + "*") if p.is_file())
    return int(process.memory_info().rss), process.num_fds(), disk


def _beside(name: str, quiet: Quiet, url: str, pid: int, database: Path, seconds: float) -> dict[str, Any]:
    attacker = subprocess.Popen(
        [sys.executable, "-m", "coordinator.bench.service_tenants", "--attack", name, "--url", url,
         "--seconds", str(seconds)],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env={**os.environ, "RHAIPOOL_BENCH_ATTACKER_TOKEN": attacker_token(name)},
    )  # fmt: skip
    peaks = [_usage(pid, database)]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.1):
            try:
                peaks.append(_usage(pid, database))
            except (psutil.Error, OSError):
                pass

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    figures = quiet.measure(lambda: attacker.poll() is None, at_least=50)
    out, _ = attacker.communicate(timeout=120)
    stop.set()
    sampler.join()
    answered = json.loads(out.decode().strip().splitlines()[-1]) if out.strip() else {}
    return {
        **figures,
        "attacker_statuses": answered.get("statuses", {}),
        "attacker_figures": answered.get("figures"),
        "peak_rss_mib": max(p[0] for p in peaks) / MB,
        "peak_fds": max(p[1] for p in peaks),
        "peak_database_mib": max(p[2] for p in peaks) / MB,
    }


def run_benchmark(seconds: float, workers: int, only: list[str] | None = None) -> dict[str, Any]:
    """B alone, then beside each attack in turn, then alone again; one service for the whole run."""
    with StandinServer() as standin, tempfile.TemporaryDirectory(prefix="rhaipool-bench-") as tmp:
        folder = Path(tmp)
        process, url = _start(folder, workers, standin.base_url)
        try:
            quiet = Quiet(url)
            quiet.measure(_until(2.0), at_least=40)  # warm: B's provider loaded, its connection open
            database = folder / "bench.db"
            alone = quiet.measure(_until(seconds), at_least=100)
            idle_rss, idle_fds, idle_disk = _usage(process.pid, database)
            rows = {}
            for name in ATTACKS:
                if only and name not in only:
                    continue
                rows[name] = _beside(name, quiet, url, process.pid, database, seconds)
            after = quiet.measure(_until(seconds), at_least=100)
            quiet.http.close()
        finally:
            process.terminate()
            process.wait(60)
    return {
        "workers": workers,
        "nofile": NOFILE,
        "load_average": load_average(),
        "alone": alone,
        "alone_after": after,
        "idle": {"rss_mib": idle_rss / MB, "fds": idle_fds, "database_mib": idle_disk / MB},
        "attacks": rows,
    }


def _print(report: dict[str, Any]) -> None:
    alone = report["alone"]
    print(
        f"B alone: p50 {alone['p50_ms']:.1f} ms, p99 {alone['p99_ms']:.1f} ms ({alone['calls']} calls); "
        f"coordinator idle: RSS {report['idle']['rss_mib']:.0f} MiB, {report['idle']['fds']} descriptors, "
        f"database {report['idle']['database_mib']:.1f} MiB; {report['workers']} workers, "
        f"descriptor limit {report['nofile']}, load average {report['load_average']:.1f}"
    )
    print(
        f"{'beside':22} {'p50 ms':>8} {'x':>6} {'p99 ms':>8} {'x':>6} {'B failed':>9}  "
        "peak RSS/fds/db   A answered"
    )
    for name, row in report["attacks"].items():
        print(
            f"{name:22} {row['p50_ms']:8.1f} {row['p50_ms'] / alone['p50_ms']:6.2f} {row['p99_ms']:8.1f} "
            f"{row['p99_ms'] / alone['p99_ms']:6.2f} {row['failed']:4d}/{row['calls']:<4d}  "
            f"{row['peak_rss_mib']:4.0f} MiB/{row['peak_fds']:4d}/{row['peak_database_mib']:5.1f} MiB  "
            + ", ".join(f"{k}: {v}" for k, v in row["attacker_statuses"].items())
            + "".join(f"; {k} {v:.1f}" for k, v in (row["attacker_figures"] or {}).items())
        )
    after = report["alone_after"]
    print(
        f"B alone again: p50 {after['p50_ms']:.1f} ms (x{after['p50_ms'] / alone['p50_ms']:.2f}), "
        f"p99 {after['p99_ms']:.1f} ms (x{after['p99_ms'] / alone['p99_ms']:.2f})"
    )
    print("A answered: HTTP statuses and counts (0: a connection closed without an answer; -1: still held)")


def main(argv: list[str] | None = None) -> None:
    """Command-line entry (``python -m coordinator.bench.service_tenants``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="each phase's length")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--only", action="append", choices=list(ATTACKS), help="run only these attacks")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--attack", help=argparse.SUPPRESS)  # the attacker's child process
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.attack:
        _attack_main(args.attack, args.url, args.seconds)
        return
    report = run_benchmark(args.seconds, args.workers, args.only)
    if args.json:
        print(json.dumps(report))
    else:
        _print(report)


if __name__ == "__main__":
    main()
