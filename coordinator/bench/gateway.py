"""Benchmark: proxied inferences through ``rhaipool serve`` against an upstream alone and LiteLLM's proxy.

One run, one machine, one upstream: nginx answering an OpenAI-shaped chat completion from memory
(``return 200``, no disk, no upstream of its own). wrk, a C load generator, drives every target in
turn, closed loop at each connection count (16 and 64 by default), for ``--rounds`` rounds (medians
printed, with each round's CPU):

- ``upstream``: nginx alone (the ceiling; healthy when at least 20x the fastest gateway's rate);
- ``native``: ``POST /api/providers/groq/inference`` of ``rhaipool serve``, whose tenant is granted an
  operator table running the seed's ``groq.rhai`` (``examples/providers/``) against nginx;
- ``v1-chat``: ``POST /v1/chat/completions`` and ``v1-messages``: ``POST /v1/messages``, the same
  provider through the OpenAI and Anthropic fronts (``n/a`` while the service answers them 404);
- ``litellm``: LiteLLM's proxy (its defaults: one worker, no database) against the same nginx, when
  installed in a venv of its own (``--litellm PATH`` or ``$RHAIPOOL_BENCH_LITELLM``; see
  BENCHMARKS.md for the install command), else printed ``not installed``;
- with ``--layers``: the native route with scripts that stop short of ``groq.rhai`` (:data:`LAYERS`),
  and each layer's CPU.

Each row: requests per second, p50 and p99 (wrk's own histogram), errors, and the CPU per request of
that gateway's processes read from the kernel (``rhaipool serve`` with its workers; LiteLLM with its
children; nginx's master and worker). Then each rhaipool route again at half its saturating rate
(wrk with a random pause per connection, its mean found by a short run: :func:`paced_pause`), for
the p99 a service sized with headroom sees. Run with::

    rhaipool bench gateway [--seconds 5] [--rounds 3] [--connections 16,64] [--workers 2]
                           [--litellm PATH | --no-litellm] [--layers] [--json]

The load generator runs on the same cores; CPU per request is the steady figure, throughput and
latency carry the machine's load (printed beside them).

The module is long because it starts three servers of different makes (nginx, ``rhaipool serve``,
LiteLLM's proxy) and drives them with wrk; they share one measurement (``drive``: wrk's run and every
target's CPU read the same way) and one printer, and split apart they would be files that never run
alone.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import secrets
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
import psutil

from coordinator.bench.measure import cpu_seconds, free_port, load_average
from coordinator.service.auth import token_sha256

__all__ = ["Row", "Target", "main", "run_benchmark"]

REPO = Path(__file__).resolve().parents[2]
COMPLETION = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 1764633600,
    "model": "bench-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 8, "completion_tokens": 1, "total_tokens": 9},
}
"""What nginx answers every request with: an OpenAI chat completion, as small as a real one gets."""
MESSAGES = [{"role": "user", "content": "hi"}]
MAX_TOKENS = 16
"""In every gateway's request: the Anthropic API requires it, and the routes compared run one inference."""
LITELLM_PATHS = (Path("/opt/litellm-venv/bin/litellm"), Path.home() / ".cache/litellm-venv/bin/litellm")
"""Where the documented install puts LiteLLM's ``litellm`` command, tried in turn."""
CORES = len(os.sched_getaffinity(0))
"""The cores this run may use: with each route's CPU per request, the most any gateway could carry here."""
UPSTREAM_HEALTHY_FACTOR = 20
"""The upstream alone must answer at least this many times the fastest gateway's rate."""
UPSTREAM_PACED_P99_MS = 1.0
"""The upstream's p99 at the gateways' half rate must be under this (or 3x its p50): a fifth of the
5 ms the gateways' own p99 is held to. Its p99 at saturation (wrk and nginx on the same two busy cores)
is scheduling, printed but not judged."""
PACED_CALIBRATION_SECS = 3.0
"""The short run that finds the pause giving half a route's saturating rate (:func:`paced_pause`). The
pauses are random (exponential, one draw per request and connection): a fixed pause keeps the
connections in step, so they arrive in bursts of all of them at once, which is the closed loop's
queue again rather than half its load."""
SETTLE_SECS = 1.0
"""Pause after each wrk run: wrk stops with every connection's request in flight, and the gateway
finishes them after it left; they must neither count in a measured run's CPU (it is read as wrk
returns) nor hold the tenant's quota of requests in flight."""
LAYERS = {
    "no-host-call": 'fn initialize(config) { #{} }\nfn inference(state, request) { #{ content: "ok" } }',
    "env-var-call": "fn initialize(config) { #{} }\n"
    'fn inference(state, request) { let v = env_var("RHAIPOOL_BENCH_UNSET"); #{ content: "ok" } }',
    "bare-http-post": "fn initialize(config) { #{ url: config.base_url } }\nfn inference(state, request) {\n"
    '    let r = http_post(`${state.url}/chat/completions`, "{}", #{}); #{ content: "ok" }\n}',
}
"""With ``--layers``: provider scripts that stop short of ``groq.rhai``, run through the native route,
so a row's difference from the next is one layer's cost: the HTTP request and the pool's call alone;
plus a host call's round trip (``env_var``, answered by the coordinator without I/O); plus egress
(one ``http_post`` to the upstream, its answer unread); then ``groq.rhai`` adds its JSON both ways."""
_RESULT = re.compile(r"^RESULT (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)$", re.MULTILINE)


@dataclass(frozen=True, slots=True)
class Target:
    """One thing wrk drives: a URL, a body, headers, and the processes whose CPU it costs."""

    name: str
    url: str
    body: bytes
    headers: dict[str, str]
    pids: Callable[[], list[int]]


@dataclass(frozen=True, slots=True)
class Row:
    """One wrk run's figures."""

    target: str
    connections: int
    requests: int
    seconds: float
    throughput: float
    p50_ms: float
    p99_ms: float
    cpu_ms_per_request: float
    errors: int
    non_2xx: int
    pause_ms: float = 0
    """The mean of a paced run's random pause per connection and request (0: closed loop)."""
    load: float = 0.0
    main_cpu_ms_per_request: float = 0.0
    """Of ``cpu_ms_per_request``: the gateway's main process alone (rhaipool: the coordinator)."""
    not_2xx: tuple[str, ...] = ()
    """The first answers that were not 2xx (status and the start of the body), up to 3 per wrk thread."""
    driver_cpu_ms_per_request: float = 0.0
    """wrk's own CPU per request: what the load generator takes of the same cores."""


def _family(pid: int) -> Callable[[], list[int]]:
    """``pid`` and every descendant alive when read (a gateway's workers)."""

    def pids() -> list[int]:
        try:
            return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]
        except psutil.Error:
            return [pid]

    return pids


def _cpu(pids: list[int]) -> tuple[float, float]:
    """CPU seconds of a gateway's processes (``pids``: its main process first, as :func:`_family`
    lists them when called), and of its main process alone. Those that exited and were reaped count
    too (their parent's children's times), so a worker replaced during a run moves its CPU from one
    term to the other instead of out of the sum, and one started during it counts from its start."""
    main = cpu_seconds(pids[0])
    try:
        reaped = psutil.Process(pids[0]).cpu_times()
        gone = reaped.children_user + reaped.children_system
    except psutil.Error:
        gone = 0.0
    return main + gone + sum(cpu_seconds(pid) for pid in pids[1:]), main


_WHY = (  # the first answers that were not 2xx, per wrk thread (a gateway's row only: it costs wrk CPU)
    "local told = 0\n"
    "function response(status, headers, body)\n"
    "  if status >= 300 and told < 3 then\n"
    "    told = told + 1\n"
    '    io.write("\\nNON2XX ", status, " ", (body:sub(1, 200):gsub("%s+", " ")), "\\n")\n'
    "  end\nend\n"
)


def _lua(target: Target, pause_ms: float) -> str:
    headers = "".join(f'wrk.headers["{k}"] = "{v}"\n' for k, v in target.headers.items())
    delay = (  # exponential pauses: arrivals as from many independent clients (see PACED_CALIBRATION_SECS)
        "function init(args) math.randomseed(os.time() * 1000003 + math.floor(os.clock() * 1e9)) end\n"
        f"function delay() return math.floor(-{pause_ms:.3f} * math.log(1 - math.random()) + 0.5) end\n"
        if pause_ms > 0
        else ""
    )
    why = "" if target.name == "upstream" else _WHY
    return (
        f'wrk.method = "POST"\nwrk.body = [==[{target.body.decode()}]==]\n{headers}{delay}{why}'
        "function done(summary, latency, requests)\n"
        "  local e = summary.errors\n"
        '  io.write(string.format("\\nRESULT %d %d %d %d %d %d\\n", summary.requests, summary.duration,\n'
        "    latency:percentile(50), latency:percentile(99), e.connect + e.read + e.write + e.timeout,\n"
        "    e.status))\nend\n"
    )


def drive(target: Target, connections: int, seconds: float, folder: Path, pause_ms: float = 0) -> Row:
    """wrk against ``target`` for ``seconds`` with ``connections`` keep-alive connections (one thread
    per 32), after a warm-up of a second; the CPU of ``target.pids`` over the measured run."""
    script = folder / f"{target.name}.lua"
    script.write_text(_lua(target, pause_ms))
    threads = max(1, min(2, connections // 32))

    def wrk(duration: float) -> str:
        argv = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration:g}s", "--timeout", "10s"]
        done = subprocess.run(
            [*argv, "-s", str(script), target.url], capture_output=True, text=True, timeout=duration + 60
        )
        if done.returncode != 0:
            raise RuntimeError(f"wrk exited {done.returncode}: {done.stderr.strip() or done.stdout.strip()}")
        return done.stdout

    wrk(1)
    time.sleep(SETTLE_SECS)
    load = load_average()
    before = _cpu(target.pids())
    driver = _children_cpu()
    out = wrk(seconds)
    driver = _children_cpu() - driver  # wrk is the only child that exits meanwhile
    after = _cpu(target.pids())  # before the requests wrk left in flight finish: not in its count
    time.sleep(SETTLE_SECS)
    found = _RESULT.search(out)
    if found is None:
        raise RuntimeError(f"wrk printed no result: {out.strip()}")
    requests, duration_us, p50_us, p99_us, errors, non_2xx = (int(g) for g in found.groups())
    cpu = after[0] - before[0]
    elapsed = duration_us / 1e6
    return Row(
        target.name,
        connections,
        requests,
        elapsed,
        requests / elapsed,
        p50_us / 1000,
        p99_us / 1000,
        cpu * 1000 / max(1, requests),
        errors,
        non_2xx,
        pause_ms,
        load,
        (after[1] - before[1]) * 1000 / max(1, requests),
        tuple(line.removeprefix("NON2XX ") for line in out.splitlines() if line.startswith("NON2XX ")),
        driver * 1000 / max(1, requests),
    )


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _wait_http(url: str, process: subprocess.Popen[bytes], what: str, wait: float = 120.0) -> None:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{what} exited {process.returncode} before it was ready")
        try:
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{what} was not ready within {wait:.0f} s")


@contextmanager
def _process(
    argv: list[str], folder: Path, name: str, env: dict[str, str] | None = None
) -> Iterator[subprocess.Popen[bytes]]:
    """A child process for the run's length, its output in ``folder/name.log``; stopped with SIGTERM."""
    with (folder / f"{name}.log").open("ab") as log:
        process = subprocess.Popen(argv, stdout=log, stderr=log, cwd=folder, env=env, start_new_session=True)
    try:
        yield process
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(10)


@contextmanager
def nginx(folder: Path) -> Iterator[tuple[str, int]]:
    """nginx on 127.0.0.1, one worker, answering :data:`COMPLETION` to any request; its base URL and pid."""
    binary = shutil.which("nginx") or "/usr/sbin/nginx"
    if not Path(binary).exists():
        raise RuntimeError("nginx is not installed (deploy/quickstart installs it)")
    port = free_port()
    root = folder / "nginx"
    root.mkdir()
    body = json.dumps(COMPLETION, separators=(",", ":"))
    temp = "".join(f"  {kind}_temp_path {root}/{kind};\n" for kind in ("client_body", "proxy", "fastcgi"))
    (root / "nginx.conf").write_text(
        "daemon off;\nworker_processes 1;\nerror_log stderr warn;\n"
        f"pid {root}/nginx.pid;\nevents {{ worker_connections 1024; }}\n"
        f"http {{\n  access_log off;\n{temp}  keepalive_requests 1000000;\n"
        f"  server {{\n    listen 127.0.0.1:{port};\n    location / {{\n"
        f"      default_type application/json;\n      return 200 '{body}';\n    }}\n  }}\n}}\n"
    )
    argv = [binary, "-p", str(root), "-c", str(root / "nginx.conf"), "-e", "stderr"]
    with _process(argv, folder, "nginx") as process:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                httpx.post(base + "/v1/chat/completions", timeout=1.0).raise_for_status()
                break
            except httpx.HTTPError:
                if time.monotonic() > deadline:
                    raise RuntimeError(
                        f"nginx did not answer: {(folder / 'nginx.log').read_text()}"
                    ) from None
                time.sleep(0.05)
        yield base + "/v1", process.pid


@contextmanager
def rhaipool_serve(
    folder: Path, upstream: str, workers: int, max_connections: int = 64, layers: bool = False
) -> Iterator[tuple[str, str, int]]:
    """``rhaipool serve`` whose tenant ``bench`` stores the seed's ``groq.rhai`` (and with ``layers``
    the :data:`LAYERS` scripts) and is granted an operator table of each, aimed at ``upstream``."""
    token = secrets.token_urlsafe(16)
    port = free_port()
    seeds = REPO / "examples" / "providers"
    if not (seeds / "groq.rhai").is_file():
        raise RuntimeError(f"the seed's groq.rhai is not at {seeds} (run from a checkout)")
    scripts = {"groq": (seeds / "groq.rhai").read_text(), **(LAYERS if layers else {})}
    tables = "".join(
        f'[model_providers.{name}]\napi_key = "bench-key"\nbase_url = "{upstream}"\n'
        'egress_allow = ["127.0.0.1"]\n'
        for name in scripts
    )
    config = folder / "serve.toml"
    config.write_text(
        f'[serve]\nlisten = "127.0.0.1:{port}"\ndatabase = "bench.db"\nworkers = {workers}\n'
        f'[tenants.bench]\ntoken_sha256 = "{token_sha256(token)}"\n'
        f"providers = {json.dumps(list(scripts))}\nmax_connections = {max_connections}\n{tables}"
    )
    argv = [sys.executable, "-m", "coordinator", "serve", "--config", str(config)]
    with _process(argv, folder, "serve") as process:
        url = f"http://127.0.0.1:{port}"
        _wait_http(url + "/readyz", process, "rhaipool serve")
        for name, source in scripts.items():
            stored = httpx.put(
                url + f"/api/scripts/provider/{name}",
                json={"content": source},
                headers={"Authorization": f"Bearer {token}"},
                timeout=30,
            )
            if stored.status_code >= 300:
                raise RuntimeError(f"storing {name}: HTTP {stored.status_code}: {stored.text[:200]}")
        yield url, token, process.pid


def find_litellm(given: str | None) -> Path | None:
    """The ``litellm`` command: ``given``, ``$RHAIPOOL_BENCH_LITELLM``, or the documented install paths."""
    named = given or os.environ.get("RHAIPOOL_BENCH_LITELLM")
    if named:
        path = Path(named)
        if not path.is_file():
            raise RuntimeError(f"LiteLLM not found at {path}")
        return path
    return next((p for p in LITELLM_PATHS if p.is_file()), None)


@contextmanager
def litellm_proxy(folder: Path, binary: Path, upstream: str) -> Iterator[tuple[str, str, int]]:
    """LiteLLM's proxy with its defaults (one worker, no database), model ``bench`` on ``upstream``;
    a master key, as it refuses to start without one (and as rhaipool checks a tenant's token)."""
    port = free_port()
    key = "sk-" + secrets.token_hex(16)
    config = folder / "litellm.yaml"
    config.write_text(
        "model_list:\n  - model_name: bench\n    litellm_params:\n      model: openai/bench-model\n"
        f"      api_base: {upstream}\n      api_key: bench-key\n"
    )
    env = {**os.environ, "LITELLM_MASTER_KEY": key, "LITELLM_TELEMETRY": "False", "LITELLM_LOG": "ERROR"}
    argv = [str(binary), "--config", str(config), "--host", "127.0.0.1", "--port", str(port)]
    with _process(argv, folder, "litellm", env) as process:
        url = f"http://127.0.0.1:{port}"
        _wait_http(url + "/health/liveliness", process, "LiteLLM's proxy", wait=180)
        yield url, key, process.pid


def _check(target: Target) -> str | None:
    """One request by hand: ``None`` when it answers 2xx, else why the route is not measured."""
    try:
        answer = httpx.post(target.url, content=target.body, headers=target.headers, timeout=30)
    except httpx.HTTPError as exc:
        return f"unreachable: {exc}"
    if answer.status_code >= 300:
        return f"HTTP {answer.status_code}: {answer.text[:200]}"
    return None


def _targets(url: str, token: str, serve_pid: int, layers: bool = False) -> list[Target]:
    auth = {"Content-Type": "application/json", "Authorization": f"Bearer {token}"}
    pids = _family(serve_pid)

    def body(value: Any) -> bytes:
        return json.dumps(value, separators=(",", ":")).encode()

    inference = body({"model": "bench-model", "max_tokens": MAX_TOKENS, "messages": MESSAGES})
    return [
        *(
            Target(name, url + f"/api/providers/{name}/inference", inference, auth, pids)
            for name in (LAYERS if layers else {})
        ),
        Target(
            "native",
            url + "/api/providers/groq/inference",
            body({"model": "bench-model", "max_tokens": MAX_TOKENS, "messages": MESSAGES}),
            auth,
            pids,
        ),
        Target(
            "v1-chat",
            url + "/v1/chat/completions",
            body({"model": "groq/bench-model", "max_tokens": MAX_TOKENS, "messages": MESSAGES}),
            auth,
            pids,
        ),
        Target(
            "v1-messages",
            url + "/v1/messages",
            body({"model": "groq/bench-model", "max_tokens": MAX_TOKENS, "messages": MESSAGES}),
            {**auth, "anthropic-version": "2023-06-01"},
            pids,
        ),
    ]


def _median_row(runs: list[Row]) -> Row:
    """Each figure's median over the rounds of one (target, connections); CPU's spread is in ``runs``."""

    def mid(name: str) -> Any:
        return statistics.median(getattr(r, name) for r in runs)

    first = runs[0]
    return Row(
        first.target,
        first.connections,
        sum(r.requests for r in runs),
        sum(r.seconds for r in runs),
        mid("throughput"),
        mid("p50_ms"),
        mid("p99_ms"),
        mid("cpu_ms_per_request"),
        sum(r.errors for r in runs),
        sum(r.non_2xx for r in runs),
        first.pause_ms,
        mid("load"),
        mid("main_cpu_ms_per_request"),
        tuple(why for r in runs for why in r.not_2xx)[:3],
        mid("driver_cpu_ms_per_request"),
    )


def run_benchmark(
    seconds: float,
    connections: list[int],
    workers: int,
    litellm: Path | None,
    exclude_litellm: bool = False,
    rounds: int = 3,
    layers: bool = False,
) -> dict[str, Any]:
    """Every target at every connection count, in turn, ``rounds`` times (a change in the machine's load
    lands on every target rather than on one), then the rhaipool routes at half their best rate."""
    report: dict[str, Any] = {"seconds": seconds, "connections": connections, "workers": workers}
    report["rounds"] = rounds
    report["started"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    report["load_average"] = [load_average()]
    rows: list[Row] = []
    skipped: dict[str, str] = {}
    with ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rhaipool-bench-gateway-")))
        upstream, nginx_pid = stack.enter_context(nginx(folder))
        url, token, serve_pid = stack.enter_context(
            rhaipool_serve(folder, upstream, workers, max_connections=2 * max(connections), layers=layers)
        )  # the tenant's quota of requests in flight above wrk's connections: speed, not the quota
        targets = [
            Target(
                "upstream",
                upstream + "/chat/completions",
                json.dumps({"model": "bench-model", "messages": MESSAGES}).encode(),
                {"Content-Type": "application/json"},
                _family(nginx_pid),
            ),
            *_targets(url, token, serve_pid, layers),
        ]
        if litellm is None:
            skipped["litellm"] = "not installed" if not exclude_litellm else "left out (--no-litellm)"
        else:
            lite_url, key, lite_pid = stack.enter_context(litellm_proxy(folder, litellm, upstream))
            targets.append(
                Target(
                    "litellm",
                    lite_url + "/v1/chat/completions",
                    json.dumps({"model": "bench", "max_tokens": MAX_TOKENS, "messages": MESSAGES}).encode(),
                    {"Content-Type": "application/json", "Authorization": f"Bearer {key}"},
                    _family(lite_pid),
                )
            )
        for target in targets:
            why = _check(target)
            if why is not None:
                skipped[target.name] = why
        live = [t for t in targets if t.name not in skipped]
        runs: dict[tuple[str, int], list[Row]] = {}
        for _ in range(rounds):
            for n in connections:
                for t in live:
                    runs.setdefault((t.name, n), []).append(drive(t, n, seconds, folder))
        rows += [_median_row(each) for each in runs.values()]
        report["cpu_ms_per_request_by_round"] = {
            f"{name}@{n}": [round(r.cpu_ms_per_request, 3) for r in each] for (name, n), each in runs.items()
        }
        base = min(connections)
        pauses = []
        for target in (t for t in live if t.name in ("native", "v1-chat", "v1-messages")):
            best = max(r.throughput for r in rows if r.target == target.name)
            pauses.append(paced_pause(target, base, best / 2, folder))
            rows.append(drive(target, base, seconds * rounds, folder, pause_ms=pauses[-1]))
        if pauses and live[0].name == "upstream":  # the upstream at the rate the gateways put on it
            rows.append(drive(live[0], base, seconds * rounds, folder, pause_ms=min(pauses)))
    report["load_average"].append(load_average())
    report["rows"] = [asdict(r) for r in rows]
    report["skipped"] = skipped
    report["verdicts"] = _verdicts(rows)
    report["targets"] = _goals(rows)
    return report


def paced_pause(target: Target, connections: int, rate: float, folder: Path) -> float:
    """The mean pause per connection at which ``target`` is sent ``rate`` requests a second: each
    connection's cycle is its request's latency plus the pause, so the pause is ``connections / rate``
    less the latency, read off a short run at the first guess (which leaves the latency out)."""
    cycle_ms = connections * 1000 / rate
    guess = drive(target, connections, PACED_CALIBRATION_SECS, folder, pause_ms=cycle_ms)
    if guess.throughput <= 0:  # nothing answered in the short run: the first guess, and its row says so
        return round(cycle_ms, 1)
    latency_ms = connections * 1000 / guess.throughput - cycle_ms
    return round(max(0.5, cycle_ms - latency_ms), 1)


def _goals(rows: list[Row]) -> list[dict[str, Any]]:
    """Issue 24's targets, each with the worst figure of this run and whether it is met."""
    closed = [r for r in rows if r.pause_ms == 0]
    out: list[dict[str, Any]] = []

    def goal(name: str, figure: float | None, limit: float, at_most: bool = True) -> None:
        met = None if figure is None else (figure <= limit if at_most else figure >= limit)
        out.append({"target": name, "figure": figure, "limit": limit, "met": met})

    chat = [r for r in closed if r.target == "v1-chat"]
    goal("v1-chat CPU ms per request", max((r.cpu_ms_per_request for r in chat), default=None), 1.0)
    by = {(r.target, r.connections): r for r in closed}
    ratios = [
        by[("v1-chat", n)].throughput / lite.throughput
        for (name, n), lite in by.items()
        if name == "litellm" and ("v1-chat", n) in by
    ]
    goal("v1-chat throughput x LiteLLM's", min(ratios, default=None), 25.0, at_most=False)
    for route in ("v1-chat", "v1-messages"):
        over = [
            by[(route, n)].cpu_ms_per_request / native.cpu_ms_per_request - 1
            for (name, n), native in by.items()
            if name == "native" and (route, n) in by
        ]
        goal(f"{route} CPU over native", max(over, default=None), 0.05)
    for r in rows:
        if r.pause_ms and r.target != "upstream":
            goal(f"{r.target} p99 ms at half its saturating rate", r.p99_ms, 5.0)
    return out


def _verdicts(rows: list[Row]) -> dict[str, Any]:
    """The upstream's health and the issue's targets, from the closed-loop rows."""
    closed = [r for r in rows if r.pause_ms == 0]
    by = {(r.target, r.connections): r for r in closed}
    out: dict[str, Any] = {}
    for n in sorted({r.connections for r in closed}):
        up = by.get(("upstream", n))
        gateways = [r for r in closed if r.connections == n and r.target != "upstream"]
        verdict: dict[str, Any] = {}
        if up is not None:
            fastest = max((g.throughput for g in gateways), default=0.0)
            reasons = []
            if fastest and up.throughput < UPSTREAM_HEALTHY_FACTOR * fastest:
                reasons.append(f"only {up.throughput / fastest:.1f}x the fastest gateway")
            paced = next((r for r in rows if r.target == "upstream" and r.pause_ms), None)
            if paced is not None and paced.p99_ms > max(3 * paced.p50_ms, UPSTREAM_PACED_P99_MS):
                reasons.append(f"at the gateways' half rate p99 {paced.p99_ms:.2f} ms > 3 x p50")
            if up.errors or up.non_2xx:
                reasons.append(f"{up.errors} errors, {up.non_2xx} non-2xx")
            verdict["upstream_healthy"] = not reasons
            verdict["upstream_why_not"] = reasons
            verdict["upstream_vs_fastest"] = up.throughput / fastest if fastest else None
        native, chat, lite = by.get(("native", n)), by.get(("v1-chat", n)), by.get(("litellm", n))
        messages = by.get(("v1-messages", n))
        if native and chat:
            verdict["v1_chat_cpu_over_native"] = chat.cpu_ms_per_request / native.cpu_ms_per_request - 1
        if native and messages:
            verdict["v1_messages_cpu_over_native"] = (
                messages.cpu_ms_per_request / native.cpu_ms_per_request - 1
            )
        for name, row in (("native", native), ("v1_chat", chat), ("v1_messages", messages)):
            if row and lite:
                verdict[f"{name}_vs_litellm"] = row.throughput / lite.throughput
        if chat and up is not None:  # what this machine's cores could carry at this run's CPU costs
            cost = chat.cpu_ms_per_request + chat.driver_cpu_ms_per_request + up.cpu_ms_per_request
            verdict["v1_chat_machine_ceiling"] = CORES * 1000 / cost
            if lite:
                verdict["v1_chat_machine_ceiling_vs_litellm"] = CORES * 1000 / cost / lite.throughput
        out[str(n)] = verdict
    return out


def _print(report: dict[str, Any]) -> None:
    load = report["load_average"]
    print(
        f"rhaipool bench gateway — {report['started']}, wrk {report['seconds']:g} s per row and round, "
        f"medians of {report['rounds']} rounds (every target in turn), {report['workers']} workers; "
        f"load {load[0]:.2f} → {load[1]:.2f}"
    )
    for name, why in report["skipped"].items():
        print(f"{name:<12} n/a: {why}")
    print(
        f"{'target':<12} {'conns':>5} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} {'CPU ms/req':>10} "
        f"{'of main':>8}  notes"
    )
    for r in report["rows"]:
        notes = []
        if r["pause_ms"]:
            best = max(x["throughput"] for x in report["rows"] if x["target"] == r["target"])
            share = (  # the upstream is paced as the fastest gateway is, not at half its own rate
                "the gateways' pace"
                if r["target"] == "upstream"
                else f"{r['throughput'] / best:.0%} of the saturating rate"
            )
            notes.append(f"paced: {r['pause_ms']:g} ms mean random pause per connection, {share}, one run")
        else:
            cpus = report["cpu_ms_per_request_by_round"][f"{r['target']}@{r['connections']}"]
            notes.append("CPU by round " + " / ".join(f"{c:.3f}" for c in cpus))
        if r["errors"] or r["non_2xx"]:
            notes.append(f"{r['errors']} errors, {r['non_2xx']} non-2xx")
        notes.append(f"load {r['load']:.2f}")
        notes += [f"answered {why}" for why in r["not_2xx"][:1]]
        print(
            f"{r['target']:<12} {r['connections']:>5} {r['throughput']:>9.0f} {r['p50_ms']:>8.2f} "
            f"{r['p99_ms']:>8.2f} {r['cpu_ms_per_request']:>10.3f} {r['main_cpu_ms_per_request']:>8.3f}  "
            + "; ".join(notes)
        )
    for n, v in report["verdicts"].items():
        parts = []
        if "upstream_healthy" in v:
            ratio = v["upstream_vs_fastest"]
            health = "healthy" if v["upstream_healthy"] else "UNHEALTHY: " + "; ".join(v["upstream_why_not"])
            parts.append(f"upstream {health}" + (f" ({ratio:.0f}x the fastest gateway)" if ratio else ""))
        for key, label in (
            ("v1_chat_cpu_over_native", "v1-chat"),
            ("v1_messages_cpu_over_native", "v1-messages"),
        ):
            if key in v:
                parts.append(f"{label} CPU {v[key]:+.1%} over native")
        for key in ("native_vs_litellm", "v1_chat_vs_litellm", "v1_messages_vs_litellm"):
            if key in v:
                parts.append(
                    f"{key.removesuffix('_vs_litellm').replace('_', '-')} x{v[key]:.1f} LiteLLM's rate"
                )
        print(f"at {n} connections: " + "; ".join(parts))
        if "v1_chat_machine_ceiling" in v:
            lite, ceiling = v.get("v1_chat_machine_ceiling_vs_litellm"), v["v1_chat_machine_ceiling"]
            print(
                f"  ceiling at {n} connections: {CORES} cores carry at most {ceiling:.0f} "
                "v1-chat requests/s at this run's CPU per request (the gateway's, wrk's and the upstream's, "
                "every core busy)" + (f": x{lite:.1f} LiteLLM's rate" if lite else "")
            )
    closed = {(r["target"], r["connections"]): r for r in report["rows"] if not r["pause_ms"]}
    steps = (*LAYERS, "native")
    for n in report["connections"]:
        chain = [closed.get((name, n)) for name in steps]
        if all(chain):
            costs = [f"HTTP request and pool call {chain[0]['cpu_ms_per_request']:.3f} ms"]  # type: ignore[index]
            labels = ("a host call's round trip", "egress", "groq.rhai's JSON")
            for label, before, after in zip(labels, chain[:-1], chain[1:], strict=True):
                total = after["cpu_ms_per_request"] - before["cpu_ms_per_request"]  # type: ignore[index]
                main = after["main_cpu_ms_per_request"] - before["main_cpu_ms_per_request"]  # type: ignore[index]
                costs.append(f"{label} {total:+.3f} (coordinator {main:+.3f}, workers {total - main:+.3f})")
            print(f"layers at {n} connections: " + "; ".join(costs))
    for g in report["targets"]:
        figure = "n/a" if g["figure"] is None else f"{g['figure']:.3f}"
        met = {None: "n/a", True: "met", False: "NOT met"}[g["met"]]
        sign = "<=" if "x LiteLLM" not in g["target"] else ">="
        print(f"target: {g['target']} {sign} {g['limit']:g}: {figure} ({met})")


def main(argv: list[str] | None = None) -> None:
    """Command-line entry (``rhaipool bench gateway``)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="wrk's duration per row and round")
    parser.add_argument("--rounds", type=int, default=3, help="every target measured in turn, this often")
    parser.add_argument("--connections", default="16,64", help="comma-separated connection counts")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--litellm", help="LiteLLM's litellm command (default: $RHAIPOOL_BENCH_LITELLM, "
                        + ", ".join(map(str, LITELLM_PATHS)) + ")")  # fmt: skip
    parser.add_argument("--no-litellm", action="store_true", help="leave LiteLLM's rows out")
    parser.add_argument(
        "--layers",
        action="store_true",
        help="also the native route with scripts that stop short of groq.rhai",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    try:
        connections = [int(c) for c in args.connections.split(",")]
    except ValueError:
        parser.error(f"--connections: comma-separated integers, got {args.connections!r}")
    if any(c < 1 for c in connections) or args.seconds <= 0 or args.workers < 1 or args.rounds < 1:
        parser.error("--connections, --seconds, --rounds and --workers must be positive")
    if shutil.which("wrk") is None:
        sys.exit("wrk is not installed (deploy/quickstart installs it: apt-get install wrk)")
    try:
        litellm = None if args.no_litellm else find_litellm(args.litellm)
        report = run_benchmark(
            args.seconds, connections, args.workers, litellm, args.no_litellm, args.rounds, args.layers
        )
    except RuntimeError as exc:
        sys.exit(f"rhaipool bench gateway: {exc}")
    if args.json:
        print(json.dumps(report))
    else:
        _print(report)


if __name__ == "__main__":
    main()
