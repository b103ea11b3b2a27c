"""Connections cannot hold the service (``connections.py``): head, body and idle timeouts, the total and
per-address caps, a reserve of descriptors under a low RLIMIT_NOFILE, accept() errors logged once per
interval. Each against a real ``rhaipool serve``; other clients come from other loopback addresses
(127.0.0.2, 127.0.0.3, ...), the well-behaved one from 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import resource
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psutil
import pytest
from service_support import TOKENS, ServiceProcess, free_port, write_config

from coordinator.service.connections import ConnectionLimits, ServiceConfigError, parse_connection_limits

HEALTH = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
SLOW_BODY = (
    b"POST /api/scripts/validate HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
    b"Authorization: Bearer %s\r\n" % TOKENS["acme"].encode()
)


def start(folder: Path, extra: str, *, nofile: int | None = None, log_json: bool = False) -> ServiceProcess:
    """A service with ``extra`` in its ``[serve]`` table, optionally under RLIMIT_NOFILE ``nofile``."""
    port = free_port()
    config = write_config(folder, port=port, extra=extra, workers=2)

    def limit() -> None:
        if nofile is not None:
            resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))

    with (folder / "service.log").open("ab") as log:
        process = subprocess.Popen(
            [sys.executable, "-m", "coordinator", "serve", "--config", str(config)]
            + (["--log-json"] if log_json else []),
            stdout=log, stderr=log, cwd=folder, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            preexec_fn=limit,
        )  # fmt: skip
    service = ServiceProcess(config, port, process)
    try:
        service.wait_ready(60)
    except BaseException:
        service.stop(signal.SIGKILL)
        raise
    return service


@contextlib.contextmanager
def running(folder: Path, extra: str, **options: int | bool | None) -> Iterator[ServiceProcess]:
    service = start(folder, extra, **options)  # type: ignore[arg-type]
    try:
        yield service
    finally:
        assert service.stop() == 0


def connect(service: ServiceProcess, source: str = "127.0.0.2") -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.settimeout(30)
    sock.connect(("127.0.0.1", service.port))
    return sock


def connect_many(service: ServiceProcess, count: int, source: str) -> list[socket.socket]:
    """``count`` connections opened at once (non-blocking connects), none of them sending anything."""
    socks = []
    for _ in range(count):
        sock = socket.socket()
        sock.bind((source, 0))
        sock.setblocking(False)
        sock.connect_ex(("127.0.0.1", service.port))
        socks.append(sock)
    return socks


def close_all(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def readable(sock: socket.socket, within: float) -> bool:
    """Data or an end waits on ``sock`` (poll: a test holds more than select's 1 024 descriptors)."""
    poller = select.poll()
    poller.register(sock, select.POLLIN | select.POLLHUP | select.POLLERR)
    return bool(poller.poll(max(within, 0) * 1000))


def ended(sock: socket.socket, within: float) -> tuple[float, bytes] | None:
    """(seconds until the service ended the connection, what it sent first), or None if still open."""
    begun = time.monotonic()
    sock.setblocking(False)
    got = b""
    while (left := begun + within - time.monotonic()) > 0:
        if not readable(sock, left):
            break
        try:
            chunk = sock.recv(65536)
        except (ConnectionResetError, BrokenPipeError):
            return time.monotonic() - begun, got
        except BlockingIOError:
            continue
        if not chunk:
            return time.monotonic() - begun, got
        got += chunk
    return None


def still_open(sock: socket.socket) -> bool:
    """Nothing received and no end of the connection right now."""
    if not readable(sock, 0):
        return True
    try:
        return bool(sock.recv(1, socket.MSG_PEEK))
    except OSError:
        return False


def answer(sock: socket.socket) -> bytes:
    """One whole response (its head and its Content-Length body)."""
    got = b""
    while b"\r\n\r\n" not in got:
        got += sock.recv(65536)
    head, _, body = got.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return got


def healthz(service: ServiceProcess) -> int:
    with httpx.Client(timeout=30) as client:
        return client.get(service.url + "/healthz").status_code


def wait_until(condition: Callable[[], bool], within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


# -- the [serve] keys ------------------------------------------------------------------------------


def test_the_keys_and_their_defaults() -> None:
    assert parse_connection_limits({}) == ConnectionLimits(10.0, 30.0, 30.0, None, 256, 64)
    given = {
        "header_timeout_secs": 2,
        "body_timeout_secs": 5.5,
        "idle_timeout_secs": 60,
        "max_connections": 1000,
        "max_connections_per_address": 16,
        "fd_reserve": 128,
        "listen": "127.0.0.1:1",  # the table's other keys are not this parser's business
    }
    assert parse_connection_limits(given) == ConnectionLimits(2.0, 5.5, 60.0, 1000, 16, 128)


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("header_timeout_secs", 0),
        ("body_timeout_secs", -1),
        ("idle_timeout_secs", "30"),
        ("idle_timeout_secs", True),
        ("header_timeout_secs", 1e9),
        ("max_connections", 0),
        ("max_connections", 1.5),
        ("max_connections_per_address", 0),
        ("fd_reserve", -1),
        ("fd_reserve", False),
    ],
)
def test_a_bad_value_is_refused_naming_its_key(key: str, value: object) -> None:
    with pytest.raises(ServiceConfigError, match=rf"^\[serve\] {key} must be"):
        parse_connection_limits({key: value})


# -- timeouts ------------------------------------------------------------------------------------

TIMEOUTS = "header_timeout_secs = 1.5\nbody_timeout_secs = 2\nidle_timeout_secs = 1.5"


@pytest.fixture(scope="module")
def timeouts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with running(tmp_path_factory.mktemp("timeouts"), TIMEOUTS) as service:
        yield service


def test_silent_connections_are_closed_after_the_header_timeout(timeouts: ServiceProcess) -> None:
    """2 200 silent connections (from ten addresses, under the per-address cap) were all held after 45 s."""
    socks = [s for i in range(10) for s in connect_many(timeouts, 220, f"127.0.0.{2 + i}")]
    try:
        results = [ended(s, 20) for s in socks]
    finally:
        close_all(socks)
    assert all(r is not None and r[1] == b"" for r in results), "a silent connection was still held"
    assert healthz(timeouts) == 200


def test_a_head_that_stalls_is_answered_408(timeouts: ServiceProcess) -> None:
    with connect(timeouts) as sock:
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")  # never the blank line
        begun = time.monotonic()
        result = ended(sock, 20)
    assert result is not None and result[1].startswith(b"HTTP/1.1 408"), result
    assert time.monotonic() - begun >= 1.0


def test_a_body_that_trickles_is_answered_408_at_the_body_timeout(timeouts: ServiceProcess) -> None:
    """One byte every 0.3 s keeps data coming, but the body as a whole is late."""
    with connect(timeouts) as sock:
        sock.sendall(SLOW_BODY + b"Content-Length: 1000\r\n\r\n{")
        begun, reply = time.monotonic(), b""
        while time.monotonic() - begun < 20 and not reply:
            try:
                sock.sendall(b" ")
            except OSError:
                break
            if readable(sock, 0.3):
                with contextlib.suppress(OSError):
                    reply = sock.recv(65536)
        elapsed = time.monotonic() - begun
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"request body not received within 2 s" in reply
    assert 1.5 <= elapsed < 20


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout(timeouts: ServiceProcess) -> None:
    with connect(timeouts) as sock:
        sock.sendall(HEALTH)
        assert answer(sock).startswith(b"HTTP/1.1 200")
        begun = time.monotonic()
        time.sleep(0.8)
        assert still_open(sock)
        result = ended(sock, 20)
    assert result is not None and result[1] == b"", result
    assert time.monotonic() - begun >= 1.0


def test_a_connection_in_use_outlives_every_timeout(timeouts: ServiceProcess) -> None:
    """The timeouts are per head, body and idle spell, not per connection."""
    with connect(timeouts) as sock:
        begun = time.monotonic()
        while time.monotonic() - begun < 5:  # more than twice each timeout
            sock.sendall(HEALTH)
            assert answer(sock).startswith(b"HTTP/1.1 200")
            time.sleep(0.5)


def test_a_reply_the_client_does_not_read_is_cut_after_the_body_timeout(timeouts: ServiceProcess) -> None:
    """Without it a client that stops reading holds its connection for ever (a close waits for the
    reply to be sent). Twelve pipelined 600 KiB replies: more than the kernel's buffers (4 MiB) hold."""
    script = "// " + "x" * (600 << 10) + "\nfn render(ctx) { 1 }"
    with timeouts.client("acme") as c:
        c.put_script("region_hook", "large", script)
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.bind(("127.0.0.2", 0))
    sock.connect(("127.0.0.1", timeouts.port))
    port = sock.getsockname()[1]
    service = psutil.Process(timeouts.process.pid)

    def held() -> bool:
        return any(c.raddr and c.raddr.port == port for c in service.net_connections("tcp"))

    with sock:
        request = (
            b"GET /api/scripts/region_hook/large HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n\r\n"
        )
        sock.sendall(request % TOKENS["acme"].encode() * 12)
        time.sleep(1.0)
        assert held()  # not before the timeout
        assert wait_until(lambda: not held(), 20), "a reply nobody reads held its connection"
        received = 0
        with contextlib.suppress(OSError):
            while chunk := sock.recv(65536):
                received += len(chunk)
    assert received < 12 * len(script)


def test_a_silent_tls_client_is_closed_after_the_header_timeout(tmp_path: Path) -> None:
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    port = free_port()
    extra = f'tls_cert = "{cert}"\ntls_key = "{key}"\nheader_timeout_secs = 1.5'
    config = write_config(tmp_path, port=port, extra=extra, workers=1)
    process = subprocess.Popen(
        [sys.executable, "-m", "coordinator", "serve", "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path,
    )  # fmt: skip
    service = ServiceProcess(config, port, process)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            time.sleep(0.1)
        with connect(service) as silent:  # no ClientHello: the handshake never starts
            begun = time.monotonic()
            result = ended(silent, 30)
        assert result is not None, "a silent TLS connection was held past its handshake bound"
        assert 1.0 <= time.monotonic() - begun < 30
    finally:
        assert service.stop() == 0


# -- caps ----------------------------------------------------------------------------------------

CAPS = "max_connections = 30\nmax_connections_per_address = 10\nheader_timeout_secs = 120"


@pytest.fixture(scope="module")
def capped(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServiceProcess]:
    with running(tmp_path_factory.mktemp("capped"), CAPS) as service:
        yield service


def refused(sock: socket.socket) -> bool:
    """Closed at once, answered 503 with Retry-After or nothing at all."""
    result = ended(sock, 5)
    if result is None:
        return False
    reply = result[1]
    return reply == b"" or (reply.startswith(b"HTTP/1.1 503") and b"retry-after: 1" in reply.lower())


def test_the_per_address_cap(capped: ServiceProcess) -> None:
    held = [connect(capped, "127.0.0.2") for _ in range(10)]
    try:
        time.sleep(0.5)
        assert all(still_open(s) for s in held)
        with connect(capped, "127.0.0.2") as over:
            assert refused(over)
        assert healthz(capped) == 200  # another address is served
        held.pop(0).close()
        time.sleep(0.5)
        with connect(capped, "127.0.0.2") as again:  # room again for that address
            time.sleep(0.5)
            assert still_open(again)
    finally:
        close_all(held)


def test_at_the_total_cap_the_oldest_silent_connection_makes_room(capped: ServiceProcess) -> None:
    held = [connect(capped, f"127.0.0.{3 + i // 10}") for i in range(30)]
    try:
        time.sleep(0.5)
        assert all(still_open(s) for s in held)
        assert healthz(capped) == 200
        first = ended(held[0], 5)
        assert first is not None and first[1] == b""  # the oldest, holding no request, was closed
        assert all(still_open(s) for s in held[1:])
    finally:
        close_all(held)


def test_at_the_total_cap_with_every_connection_busy_a_new_one_is_refused(capped: ServiceProcess) -> None:
    held = [connect(capped, f"127.0.0.{3 + i // 10}") for i in range(30)]
    try:
        for sock in held:  # each one inside a request: its head sent, its body awaited
            sock.sendall(SLOW_BODY + b"Content-Length: 100\r\n\r\n")
        time.sleep(0.5)
        with connect(capped, "127.0.0.1") as newcomer:
            assert refused(newcomer)
        assert all(still_open(s) for s in held)
    finally:
        close_all(held)
    assert wait_until(lambda: healthz(capped) == 200, 10)


# -- the descriptor reserve ----------------------------------------------------------------------


def workers(service: ServiceProcess) -> set[int]:
    found = set()
    for child in service.children():
        with contextlib.suppress(psutil.Error):
            if "worker" in child.cmdline():
                found.add(child.pid)
    return found


def test_with_few_descriptors_silent_sockets_stop_neither_health_checks_nor_others(tmp_path: Path) -> None:
    """RLIMIT_NOFILE 1024 and 1 100 silent sockets, from five addresses (each under its cap): more than
    the service can hold. They made 10/10 of another tenant's calls fail, and a killed worker stayed
    dead."""
    with running(tmp_path, "", nofile=1024) as service:
        with service.client("globex") as b:
            b.put_script("region_hook", "plain", 'fn render(ctx) { "hello" }')
            b.create_region("notes", script="plain", budget=100)
            attack = [s for i in range(5) for s in connect_many(service, 220, f"127.0.0.{2 + i}")]
            try:
                time.sleep(2)
                held = len(psutil.Process(service.process.pid).net_connections("tcp"))
                for _ in range(10):
                    assert healthz(service) == 200
                    assert b.render("notes", stage_name="plan")["fallback"] is False
                before = workers(service)
                assert len(before) >= 2
                os.kill(min(before), signal.SIGKILL)
                replaced = wait_until(lambda: len(workers(service) - before) >= 1, 60)
                assert replaced, "the killed worker was not replaced"
                for _ in range(5):
                    assert b.render("notes", stage_name="plan")["fallback"] is False
                descriptors = len(os.listdir(f"/proc/{service.process.pid}/fd"))
            finally:
                close_all(attack)
        log = service.log()
    assert held < 1024 - 48, held  # the reserve is kept
    assert descriptors < 1024 - 32, descriptors
    assert "Too many open files" not in log and "out of system resource" not in log
    assert len(log) < 50_000, log[-3000:]


def test_a_worker_starting_while_connections_take_every_descriptor_still_connects(tmp_path: Path) -> None:
    """No reserve, no caps: a flood of silent sockets while a replacement worker is starting. libzmq
    aborts the whole process when its accept() of a worker's connection finds no descriptor (the service
    died with SIGABRT, "Too many open files (src/ipc_listener.cpp)"), so a starting worker's connection
    is kept room for whatever ``fd_reserve`` says."""
    extra = "fd_reserve = 0\nmax_connections = 100000\nmax_connections_per_address = 100000"
    with running(tmp_path, extra + "\nheader_timeout_secs = 120", nofile=128) as service:
        assert wait_until(lambda: len(workers(service)) >= 2, 60)
        before = workers(service)
        os.kill(min(before), signal.SIGKILL)
        deadline = time.monotonic() + 60
        while not workers(service) - before and time.monotonic() < deadline:
            time.sleep(0.002)  # the replacement is spawned: flood before its connection arrives
        assert workers(service) - before, "the killed worker was not replaced"
        attack = connect_many(service, 300, "127.0.0.2")
        try:
            time.sleep(3)  # the replacement starts and connects in well under a second
            assert service.process.poll() is None, service.log()[-3000:]
        finally:
            close_all(attack)
        assert wait_until(lambda: healthz(service) == 200, 30)
        with service.client("globex") as b:
            b.put_script("region_hook", "plain", 'fn render(ctx) { "hello" }')
            b.create_region("notes", script="plain", budget=100)
            for _ in range(4):
                assert b.render("notes", stage_name="plan")["fallback"] is False
        log = service.log()
    assert "accept() failed" in log  # the flood did take every descriptor, once the worker had its own
    assert "ipc_listener" not in log
    assert "pool tick failed" not in log  # the memory watchdog skips a round it cannot read /proc for


def test_accept_errors_are_logged_once_per_interval(tmp_path: Path) -> None:
    """With no reserve and no caps the process does run out of descriptors: a line per 10 s, not a flood
    (asyncio retries accept() every second, for every connection waiting)."""
    extra = "fd_reserve = 0\nmax_connections = 100000\nmax_connections_per_address = 100000"
    with running(tmp_path, extra + "\nheader_timeout_secs = 120", nofile=128) as service:
        attack = connect_many(service, 300, "127.0.0.2")
        try:
            time.sleep(14)  # one interval and some: a second report, not a third
        finally:
            close_all(attack)
        assert wait_until(lambda: healthz(service) == 200, 30)
        log = service.log()
    reports = [line for line in log.splitlines() if "accept() failed" in line]
    # at least 14 s of failing accepts (hundreds of attempts): one report, then one per 10 s interval;
    # a third only when connecting the 300 took the failures past 20 s on a loaded machine
    assert 2 <= len(reports) <= 3, log[-3000:]
    assert "failed 1 time(s)" in reports[0] and "Too many open files" in reports[0]
    assert "descriptor limit 128" in reports[0]
    assert "failed 1 time(s)" not in reports[1]  # the second counts every attempt since the first
    assert "out of system resource" not in log  # asyncio's own report: a traceback per attempt
