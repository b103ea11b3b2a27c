"""A hostile tenant against a real ``rhaipool serve``, with a quiet tenant calling alongside (issue 22
point 9): the parts every module of ``tests/hostile/service/`` shares.

- :class:`Neighbour` is tenant B, in a process of its own (so the attacker's work in the test process
  cannot slow B's measured calls through the GIL): it also hosts the stand-in model API, renders a
  persistent region of its own and runs inferences of the seed's ``groq.rhai`` against that API, one
  call after another over one keep-alive connection, and records every latency and every failure.
- :class:`Attacker` is tenant A, speaking HTTP/1.1 from ``127.0.0.2`` (its own client address, so the
  per-address connection cap is A's, not B's) over one keep-alive connection it can check is kept.
- :class:`Arena` is one service with both tenants, the configured bounds, B's baseline (measured once,
  before any attack) and the checks each case makes: B lost no call, B's p99 within
  ``max(3 × baseline, baseline + 250 ms)``, the coordinator's memory, database size and descriptors
  within their bounds, and a clean restart with B's data intact.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import select
import selectors
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil
from service_support import ADMIN, ServiceProcess, free_port, sha

__all__ = [
    "ATTACKER",
    "ATTACKER_ADDRESS",
    "B_ENTRIES",
    "HOSTILE_ENV",
    "MIB",
    "NEIGHBOUR",
    "OPERATOR_KEY",
    "PLAIN",
    "PONG",
    "SECRET",
    "TOKENS",
    "Answer",
    "Arena",
    "Attacker",
    "Bounds",
    "Calls",
    "Neighbour",
    "Usage",
    "assert_typed",
    "latency_bound",
    "neighbour_main",
    "p99",
]

ATTACKER = "mallory"
NEIGHBOUR = "bob"
TOKENS = {ATTACKER: "mallory-token-6b1d0c", NEIGHBOUR: "bob-token-93f2aa"}
ATTACKER_ADDRESS = "127.0.0.2"
"""A's client address: all of 127.0.0.0/8 is loopback, so the service sees A and B apart."""
MIB = 1 << 20
SUPPORT = Path(__file__).resolve().parent
REPO = SUPPORT.parents[1]

SECRET = "hostile-secret-value-4f1c"
PLAIN = "hostile-plain-value-77ab"
OPERATOR_KEY = "operator-groq-key-5a9e"
HOSTILE_ENV = {
    "RHAIPOOL_HOSTILE_SECRET_KEY": SECRET,
    "RHAIPOOL_HOSTILE_TOKEN": SECRET,
    "RHAIPOOL_HOSTILE_PLAIN": PLAIN,
}
"""The service's environment holds these; no tenant's answer may ever show one (nor the operator's key)."""

B_HOOK = """
fn render(ctx) { ctx.entries.map(|e| e.content).reduce(|a, b| a + "|" + b, "") }
"""
B_REGION = "journal"
B_ENTRIES = [f"bob's note {i}" for i in range(5)]
PONG = {"model": "standin-small", "messages": [{"role": "user", "content": "Reply with exactly: PONG"}]}
B_EXPECTED_RENDER = "|" + "|".join(B_ENTRIES)


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def latency_bound(baseline: float) -> float:
    """B's p99 under attack may be 3× its baseline, with a 250 ms floor (a loaded 2-core machine)."""
    return max(3 * baseline, baseline + 0.25)


# -- tenant B, in its own process ------------------------------------------------------------------


def _b_call(client: httpx.Client, turn: int) -> None:
    """One of B's calls (a render, then an inference, in turn); AssertionError when it is not right."""
    if turn % 2 == 0:
        r = client.post(f"/api/regions/{B_REGION}/render", json={})
        assert r.status_code == 200, f"render: {r.status_code} {r.text[:300]}"
        report = r.json()
        text = report["system"][0]["text"] if report.get("system") else None
        assert text == B_EXPECTED_RENDER and report["fallback"] is False, f"render: {r.text[:300]}"
    else:
        r = client.post("/api/providers/groq/inference", json=PONG)
        assert r.status_code == 200, f"inference: {r.status_code} {r.text[:300]}"
        assert r.json()["content"] == "PONG", f"inference: {r.text[:300]}"


def _b_setup(client: httpx.Client, groq_script: str) -> None:
    r = client.put("/api/scripts/region_hook/journal_hook", json={"content": B_HOOK})
    assert r.status_code == 200, r.text
    r = client.put("/api/scripts/provider/groq", json={"content": groq_script})
    assert r.status_code == 200, r.text
    r = client.post("/api/regions", json={"name": B_REGION, "script": "journal_hook", "budget": 10_000,
                                          "persistent": True})  # fmt: skip
    assert r.status_code == 201, r.text
    for content in B_ENTRIES:
        r = client.post(f"/api/regions/{B_REGION}/write", json={"content": content, "tokens": 5})
        assert r.status_code == 200 and r.json()["outcome"] == "accepted", r.text


def _b_check(client: httpx.Client, groq_script: str) -> None:
    """B's data is as B left it: its region's entries, its scripts."""
    r = client.get(f"/api/regions/{B_REGION}")
    assert r.status_code == 200, r.text
    assert [e["content"] for e in r.json()["entries"]] == B_ENTRIES, r.text[:500]
    r = client.get("/api/scripts/provider/groq")
    assert r.status_code == 200 and r.json()["content"] == groq_script, r.text[:300]
    r = client.get("/api/scripts/region_hook/journal_hook")
    assert r.status_code == 200 and r.json()["content"] == B_HOOK, r.text[:300]


def neighbour_main() -> None:
    """The child process: the stand-in API and tenant B, driven by the parent's commands (one JSON
    line each on stdin, one JSON line answered on stdout)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    conn = _Lines()
    from coordinator._cli.demo import GROQ_SCRIPT
    from coordinator.bench.standin import StandinServer

    groq = GROQ_SCRIPT.read_text(encoding="utf-8")
    server = StandinServer().start()
    conn.send(("ready", server.base_url))
    client: httpx.Client | None = None
    stop = threading.Event()
    loop: threading.Thread | None = None
    latencies: list[float] = []
    kinds: list[str] = []
    failures: list[str] = []

    def run() -> None:
        turn = 0
        while not stop.is_set():
            assert client is not None
            started = time.perf_counter()
            try:
                _b_call(client, turn)
            except Exception as exc:
                failures.append(f"{type(exc).__name__}: {exc}"[:500])
            latencies.append(time.perf_counter() - started)
            kinds.append("render" if turn % 2 == 0 else "inference")
            turn += 1
            time.sleep(0.002)

    try:
        while True:
            command, arg = conn.recv()
            try:
                if command == "connect":
                    if client is not None:
                        client.close()
                    client = httpx.Client(
                        base_url=arg, headers={"Authorization": f"Bearer {TOKENS[NEIGHBOUR]}"}, timeout=30.0
                    )
                    conn.send(("ok", None))
                elif command == "setup":
                    assert client is not None
                    _b_setup(client, groq)
                    conn.send(("ok", None))
                elif command == "check":
                    assert client is not None
                    _b_check(client, groq)
                    conn.send(("ok", None))
                elif command == "baseline":
                    assert client is not None
                    samples = []
                    for turn in range(arg):
                        started = time.perf_counter()
                        _b_call(client, turn)
                        samples.append(time.perf_counter() - started)
                    conn.send(("ok", samples))
                elif command == "start":
                    latencies.clear()
                    kinds.clear()
                    failures.clear()
                    stop.clear()
                    loop = threading.Thread(target=run, daemon=True)
                    loop.start()
                    conn.send(("ok", None))
                elif command == "stop":
                    deadline = time.monotonic() + 60.0
                    while len(latencies) < arg and time.monotonic() < deadline:
                        time.sleep(0.01)
                    stop.set()
                    if loop is not None:
                        loop.join(60.0)
                    conn.send(("ok", {"latencies": latencies, "kinds": kinds, "failures": failures}))
                elif command == "time_gets":
                    assert client is not None
                    timed: dict[str, list[float]] = {}
                    for path in arg["paths"]:
                        for _ in range(arg["n"]):
                            started = time.perf_counter()
                            r = client.get(path)
                            assert r.status_code == 200, f"GET {path}: {r.status_code} {r.text[:300]}"
                            timed.setdefault(path, []).append(time.perf_counter() - started)
                    conn.send(("ok", timed))
                elif command == "exit":
                    conn.send(("ok", None))
                    return
                else:
                    conn.send(("error", f"unknown command {command!r}"))
            except Exception as exc:
                conn.send(("error", f"{type(exc).__name__}: {exc}"[:2000]))
    finally:
        stop.set()
        if client is not None:
            client.close()
        server.stop()


class _Lines:
    """The child's end of the command channel."""

    def __init__(self) -> None:
        self._out = os.fdopen(os.dup(1), "w", encoding="utf-8")
        os.dup2(2, 1)  # anything else printed goes to stderr, never into the channel

    def recv(self) -> tuple[str, Any]:
        line = sys.stdin.readline()
        if not line:
            return ("exit", None)
        command, arg = json.loads(line)
        return command, arg

    def send(self, message: tuple[str, Any]) -> None:
        self._out.write(json.dumps(message) + "\n")
        self._out.flush()


@dataclass
class Calls:
    """What B saw while a case ran."""

    latencies: list[float]
    kinds: list[str]
    failures: list[str]

    def slowest(self, n: int = 3) -> str:
        ranked = sorted(zip(self.latencies, self.kinds, strict=True), reverse=True)[:n]
        return ", ".join(f"{kind} {latency * 1000:.0f} ms" for latency, kind in ranked)


class Neighbour:
    """Tenant B in a child process; each method is one command, waited for."""

    def __init__(self) -> None:
        code = f"import sys; sys.path.insert(0, {str(SUPPORT)!r}); import hostile_service; "
        code += "hostile_service.neighbour_main()"
        self.process = subprocess.Popen(
            [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=REPO,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )  # fmt: skip
        self._selector = selectors.DefaultSelector()
        assert self.process.stdout is not None
        self._selector.register(self.process.stdout, selectors.EVENT_READ)
        self.standin_url: str = self._reply(60.0)

    def _reply(self, timeout: float) -> Any:
        assert self.process.stdout is not None
        if not self._selector.select(timeout):
            raise AssertionError(f"tenant B did not answer within {timeout} s")
        line = self.process.stdout.readline()
        if not line:
            raise AssertionError(f"tenant B's process exited ({self.process.poll()})")
        status, value = json.loads(line)
        if status not in ("ok", "ready"):
            raise AssertionError(f"tenant B: {value}")
        return value

    def _do(self, command: str, arg: Any = None, timeout: float = 90.0) -> Any:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps([command, arg]).encode() + b"\n")
        self.process.stdin.flush()
        return self._reply(timeout)

    def connect(self, url: str) -> None:
        self._do("connect", url)

    def setup(self) -> None:
        self._do("setup")

    def check(self) -> None:
        """B's region and scripts are intact (AssertionError otherwise)."""
        self._do("check")

    def baseline(self, samples: int) -> list[float]:
        return list(self._do("baseline", samples))

    def start(self) -> None:
        self._do("start")

    def stop(self, at_least: int) -> Calls:
        out = self._do("stop", at_least)
        return Calls(out["latencies"], out["kinds"], out["failures"])

    def time_gets(self, paths: list[str], n: int) -> dict[str, list[float]]:
        """B's GET of each path, ``n`` times one after another: the latencies by path."""
        return dict(self._do("time_gets", {"paths": paths, "n": n}))

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._do("exit", timeout=10.0)
        try:
            self.process.wait(10.0)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5.0)
        self._selector.close()
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()


# -- tenant A --------------------------------------------------------------------------------------


@dataclass
class Answer:
    """One reply A got, and whether its connection was kept open for the next request."""

    status: int
    body: bytes
    headers: dict[str, str]
    kept_alive: bool

    def json(self) -> Any:
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class Attacker:
    """Tenant A over one HTTP/1.1 keep-alive connection from :data:`ATTACKER_ADDRESS`."""

    def __init__(self, port: int, token: str = TOKENS[ATTACKER], *, source: str = ATTACKER_ADDRESS) -> None:
        self.port, self.token, self.source = port, token, source
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is not None and self._conn.sock is not None and _closed_by_peer(self._conn.sock):
            self.close()  # the service closed it while it idled (idle_timeout_secs), as it may
        if self._conn is None:
            self._conn = http.client.HTTPConnection(
                "127.0.0.1", self.port, timeout=60.0, source_address=(self.source, 0)
            )
        return self._conn

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
    ) -> Answer:
        """Send ``body`` as JSON (or ``raw`` bytes as they are); the answer."""
        conn = self._connection()
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        sent = {"Authorization": f"Bearer {self.token}", **(headers or {})}
        if data is not None:
            sent.setdefault("Content-Type", "application/json")
        try:
            conn.request(method, path, body=data, headers=sent)
            response = conn.getresponse()
            content = response.read()
        except (OSError, http.client.HTTPException):
            self.close()
            raise
        kept = conn.sock is not None and not response.will_close
        if not kept:
            self.close()
        return Answer(response.status, content, {k.lower(): v for k, v in response.getheaders()}, kept)

    def put_script(self, kind: str, name: str, content: str) -> Answer:
        return self.request("PUT", f"/api/scripts/{kind}/{name}", {"content": content})

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether the other end closed an idle connection (readable, with nothing to read)."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def assert_typed(answer: Answer, statuses: range | tuple[int, ...] = range(400, 600)) -> Any:
    """A refused A as the service promises: a status from ``statuses`` (never a bare 500), a JSON error
    in one short line (no traceback), and the keep-alive connection kept. The error."""
    assert answer.status in statuses and answer.status != 500, f"{answer.status}: {answer.text[:500]}"
    assert answer.headers.get("content-type", "").startswith("application/json"), answer.headers
    error = answer.json()["error"]
    message = error["message"] if isinstance(error, dict) else error
    assert isinstance(message, str) and message, answer.text[:500]
    assert "Traceback" not in answer.text and "\n" not in message, answer.text[:500]
    assert len(answer.body) < 4096, f"a {len(answer.body)}-byte error"
    assert answer.kept_alive, f"the connection was closed after {answer.status}: {answer.text[:200]}"
    return error


# -- resources -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """The coordinator's resident memory, its database's size on disk, its open descriptors."""

    rss: int
    disk: int
    fds: int

    def __str__(self) -> str:
        return f"RSS {self.rss / MIB:.0f} MiB, database {self.disk / MIB:.1f} MiB, {self.fds} descriptors"


@dataclass(frozen=True)
class Bounds:
    """How far the coordinator's resources may grow past their idle values: what the configured
    quotas allow the attacker to hold, plus the slack of a process that serves (allocator pools,
    SQLite's page cache and WAL, B's and the test's own connections)."""

    rss: int
    disk: int
    fds: int

    def check(self, idle: Usage, now: Usage, what: str) -> None:
        assert now.rss <= idle.rss + self.rss, f"{what}: memory {now} (idle: {idle})"
        assert now.disk <= idle.disk + self.disk, f"{what}: disk {now} (idle: {idle})"
        assert now.fds <= idle.fds + self.fds, f"{what}: descriptors {now} (idle: {idle})"


def usage(service: ServiceProcess, database: Path) -> Usage:
    process = psutil.Process(service.process.pid)
    disk = sum(p.stat().st_size for p in database.parent.glob(database.name + "*") if p.is_file())
    return Usage(int(process.memory_info().rss), disk, process.num_fds())


# -- one service, two tenants ----------------------------------------------------------------------


def config_text(port: int, standin: str, *, serve: str, defaults: str, attacker: str) -> str:
    """The service config: B with the defaults, A with its own ``[tenants.mallory]`` keys on top."""
    return "\n".join([
        "[serve]",
        f'listen = "127.0.0.1:{port}"',
        'database = "state/rhaipool.db"',
        f'admin_token_sha256 = "{sha(ADMIN)}"',
        "workers = 2",
        "grace_secs = 3",
        serve,
        "[serve.tenant_defaults]",
        defaults,
        f"[tenants.{NEIGHBOUR}]",
        f'token_sha256 = "{sha(TOKENS[NEIGHBOUR])}"',
        'providers = ["groq"]',
        f"[tenants.{ATTACKER}]",
        f'token_sha256 = "{sha(TOKENS[ATTACKER])}"',
        'providers = ["groq"]',
        attacker,
        "[model_providers.groq]",
        f'api_key = "{OPERATOR_KEY}"',
        f'base_url = "{standin}"',
        'egress_allow = ["127.0.0.1"]',
        "",
    ])  # fmt: skip


@dataclass
class Arena:
    """One running service, tenant B set up and measured, tenant A ready to attack."""

    folder: Path
    port: int
    neighbour: Neighbour
    bounds: Bounds
    log_json: bool
    service: ServiceProcess = field(init=False)
    idle: Usage = field(init=False)
    baseline: float = field(init=False)
    baseline_p50: float = field(init=False)
    attacker: Attacker = field(init=False)
    restart_secs: tuple[float, float] = field(default=(0.0, 0.0), init=False)
    """How long the last restart's stop and start took."""
    after_restart: list[tuple[str, Callable[[], None]]] = field(default_factory=list, init=False)
    """Checks the cases left for the restart (test_restart.py): what each attack's accepted state is."""

    @classmethod
    def open(
        cls,
        folder: Path,
        bounds: Bounds,
        *,
        serve: str = "",
        defaults: str = "",
        attacker: str = "",
        log_json: bool = True,
        env: dict[str, str] | None = None,
    ) -> Arena:
        neighbour = Neighbour()
        try:
            port = free_port()
            config = folder / "serve.toml"
            config.write_text(
                config_text(port, neighbour.standin_url, serve=serve, defaults=defaults, attacker=attacker)
            )
            arena = cls(folder, port, neighbour, bounds, log_json)
            saved = {k: os.environ.get(k) for k in env or {}}
            os.environ.update(env or {})
            try:
                arena.service = ServiceProcess.start(config, port, log_json=log_json)
            finally:
                for k, v in saved.items():
                    if v is None:
                        os.environ.pop(k, None)
                    else:
                        os.environ[k] = v
            neighbour.connect(arena.service.url)
            neighbour.setup()
            neighbour.baseline(20)  # warm: B's provider loaded, its connection open
            arena.measure_baseline()
            arena.attacker = Attacker(port)
            return arena
        except BaseException:
            neighbour.close()
            raise

    def measure_baseline(self, samples: int = 60) -> None:
        """B's latency with nothing else running (p99 and median), and the coordinator's idle usage."""
        measured = self.neighbour.baseline(samples)
        self.baseline, self.baseline_p50 = p99(measured), statistics.median(measured)
        self.idle = self.usage()

    @property
    def database(self) -> Path:
        return self.folder / "state" / "rhaipool.db"

    @property
    def url(self) -> str:
        return self.service.url

    def usage(self) -> Usage:
        return usage(self.service, self.database)

    def add_tenant(self, tenant: str, token: str) -> Attacker:
        """A tenant with the defaults' quotas, added through the admin API; its connection from A's
        address."""
        admin = Attacker(self.port, ADMIN)
        try:
            answer = admin.request("PUT", f"/api/admin/tenants/{tenant}", {"token_sha256": sha(token)})
        finally:
            admin.close()
        assert answer.status in (200, 201), answer.text
        return Attacker(self.port, token)

    @contextlib.contextmanager
    def alongside(self, what: str, *, samples: int = 30) -> Iterator[None]:
        """B calls while the block attacks; afterwards every promise of point 9 but the restart is
        checked: B lost no call and kept its latency, the service is healthy, resources bounded."""
        self.neighbour.start()
        peak = self.usage()
        watching = threading.Event()
        peaks: list[Usage] = []

        def watch() -> None:  # the peak, not only the end: an attack may hold memory while it runs
            while not watching.wait(0.1):
                with contextlib.suppress(psutil.Error, OSError):
                    peaks.append(self.usage())

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            yield
        finally:
            calls = self.neighbour.stop(samples)
            watching.set()
            watcher.join(5.0)
        peaks.append(self.usage())
        peak = Usage(max(u.rss for u in peaks), max(u.disk for u in peaks), max(u.fds for u in peaks))
        assert not calls.failures, f"{what}: B lost {len(calls.failures)} call(s): {calls.failures[:3]}"
        during = p99(calls.latencies)
        assert during <= latency_bound(self.baseline), (
            f"{what}: B's p99 {during * 1000:.1f} ms vs baseline {self.baseline * 1000:.1f} ms "
            f"({len(calls.latencies)} calls; slowest: {calls.slowest()})"
        )
        self.bounds.check(self.idle, peak, what)
        self.healthy()

    def healthy(self) -> None:
        assert self.service.process.poll() is None, f"the service exited: {self.service.log()[-2000:]}"
        r = httpx.get(self.url + "/healthz", timeout=10.0)
        assert r.status_code == 200, r.text

    def restart(self) -> None:
        """Stop (exit 0, no worker left), start again on the same database, B's data intact."""
        self.attacker.close()
        started = time.monotonic()
        assert self.service.stop() == 0, self.service.log()[-2000:]
        stopped = time.monotonic()
        self.service = ServiceProcess.start(self.service.config, self.port, log_json=self.log_json)
        self.restart_secs = (stopped - started, time.monotonic() - stopped)
        self.neighbour.connect(self.url)
        self.neighbour.check()
        self.neighbour.baseline(4)  # B's calls answer again
        self.idle = self.usage()

    def close(self) -> None:
        try:
            self.attacker.close()
            if self.service.process.poll() is None:
                assert self.service.stop() == 0
        finally:
            self.neighbour.close()
