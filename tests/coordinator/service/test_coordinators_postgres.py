"""``rhaipool serve`` on PostgreSQL, one and two coordinators over one real database.

One coordinator keeps SQLite's semantics (what it acknowledged is there after a restart; a retried
write with the same ``Idempotency-Key`` applies once). Two share the tenants by lease: a tenant is
served by one of them, the other forwards its requests there (test_forwarding.py) and refuses one
forwarded already with a 503 saying so; a clean stop hands its tenants over at once, and the new owner
loads their scripts and regions from the database at the first request; a paused owner that comes back
drops the tenant and serves it no more (what reaches it goes to the new owner); a coordinator cut off
from the database stops serving and reports not ready.
"""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import psycopg
import pytest
from postgres_server import PostgresServer
from service_support import TOKENS, ServiceProcess, free_port, sha, small_tmpfs, write_config

from coordinator.client import Client, ServiceError

HOOK = "fn render(ctx) { `${ctx.entries.len()}` }"
AUTH = {"Authorization": f"Bearer {TOKENS['acme']}"}
LEASE = 2.0


def _start(folder: Path, url: str, *, lease: float = LEASE) -> ServiceProcess:
    folder.mkdir(parents=True, exist_ok=True)
    port = free_port()
    config = write_config(folder, port=port, workers=1, extra=f"lease_secs = {lease}")
    config.write_text(config.read_text().replace('database = "state/rhaipool.db"', f'database = "{url}"'))
    return ServiceProcess.start(config, port)


@pytest.fixture
def url(postgres: PostgresServer) -> str:
    return postgres.fresh()


def _entries(service: ServiceProcess, region: str = "log") -> list[str]:
    with service.client("acme") as c:
        return [e["content"] for e in c.get_region(region)["entries"]]


def _wait(check: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.1)
    raise AssertionError(f"not within {timeout} s: {what}")


def test_one_coordinator_keeps_what_it_acknowledged(tmp_path: Path, url: str) -> None:
    service = _start(tmp_path, url)
    try:
        with service.client("acme") as c:
            c.put_script("region_hook", "log", HOOK)
            c.create_region("log", script="log", budget=10_000, persistent=True)
            c.write("log", "one", tokens=1)
        key = {"Idempotency-Key": str(uuid.uuid4()), **AUTH}
        write = f"{service.url}/api/regions/log/write"
        first = httpx.post(write, json={"content": "two", "tokens": 1}, headers=key)
        again = httpx.post(write, json={"content": "two", "tokens": 1}, headers=key)
        assert first.status_code == again.status_code == 200
        assert again.headers["idempotent-replayed"] == "true"
        assert service.stop() == 0
        service = _start(tmp_path, url)
        assert _entries(service) == ["one", "two"]
        with service.client("acme") as c:
            assert [s["name"] for s in c.list_scripts()["scripts"]] == ["log"]
    finally:
        service.stop()


@pytest.fixture
def small_disk_database(postgres: PostgresServer) -> Iterator[tuple[str, Path]]:
    """A database whose tables live on a 32 MiB tmpfs (a tablespace there: root only, it mounts), and
    that file system's mount point (fill it to make the server's writes fail with SQLSTATE 53100)."""
    mount = Path(tempfile.mkdtemp(prefix="rhaipool-pg-disk-"))
    owner = pwd.getpwnam(postgres.user) if postgres.user is not None else pwd.getpwuid(os.getuid())
    options = f"size=32m,mode=0700,uid={owner.pw_uid},gid={owner.pw_gid}"
    try:
        with small_tmpfs(mount, options):
            space = mount / "tablespace"
            space.mkdir()
            os.chown(space, owner.pw_uid, owner.pw_gid)
            name = f"small_{uuid.uuid4().hex[:12]}"
            try:
                with psycopg.connect(postgres.url, autocommit=True) as db:
                    db.execute(f"CREATE TABLESPACE {name} LOCATION '{space}'")
                    db.execute(f'CREATE DATABASE "{name}" TABLESPACE {name}')
                yield postgres.url.rsplit("/", 1)[0] + f"/{name}", mount
            finally:
                with psycopg.connect(postgres.url, autocommit=True) as db:
                    db.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
                    db.execute(f"DROP TABLESPACE IF EXISTS {name}")
    finally:
        shutil.rmtree(mount, ignore_errors=True)


def test_a_full_disk_answers_507_and_changes_nothing(
    tmp_path: Path, small_disk_database: tuple[str, Path]
) -> None:
    """The server's own disk full for real (its tables on a full tmpfs): every write it cannot take is
    a 507, and memory and the database stay as they were; once there is room again, writes go on."""
    url, disk = small_disk_database
    service = _start(tmp_path, url)
    try:
        with service.client("acme") as c:
            c.put_script("region_hook", "log", HOOK)
            c.create_region("log", script="log", budget=10_000_000, persistent=True)
            c.write("log", "before", tokens=1)
            filler = disk / "filler"
            with filler.open("wb") as f, contextlib.suppress(OSError):  # to the last byte
                while True:
                    f.write(os.urandom(65536))
                    f.flush()
            acked, refused = ["before"], []
            for i in range(10):
                text = f"lost-{i}-" + uuid.uuid4().hex * 4000  # 128 KB each: new pages, not reused room
                try:
                    c.write("log", text, tokens=1)
                    acked.append(text)
                except ServiceError as exc:
                    refused.append(exc)
            assert refused, "the full disk refused no write"
            assert all(exc.status == 507 and "storage is full" in str(exc) for exc in refused), refused
            assert _entries(service) == acked  # memory as it was
            with psycopg.connect(url, autocommit=True) as raw:
                stored = [
                    r[0] for r in raw.execute("SELECT entry FROM region_entries ORDER BY seq").fetchall()
                ]
            assert [json.loads(e)["content"] for e in stored] == acked  # and the database
            filler.unlink()
            c.write("log", "after", tokens=1)
        assert service.stop() == 0
        service = _start(tmp_path, url)
        assert _entries(service) == [*acked, "after"]
    finally:
        service.stop()


def test_rows_that_cannot_load_are_set_aside_and_a_write_costs_the_entry(tmp_path: Path, url: str) -> None:
    service = _start(tmp_path, url)
    try:
        with service.client("acme") as c:
            c.put_script("region_hook", "log", HOOK)
            c.create_region("good", script="log", budget=10_000_000, persistent=True)
            c.create_region("broken", script="log", budget=1000, persistent=True)
            for i in range(40):
                c.write("good", f"{i}-" + "y" * 200_000, tokens=1)  # ~8 MB held

            def timed() -> float:
                begun = time.perf_counter()
                c.write("good", "small", tokens=1)
                return time.perf_counter() - begun

            small = min(timed() for _ in range(5))
        assert small < 0.25, f"a small write to an 8 MB region took {small:.3f} s"
        assert service.stop() == 0
        with psycopg.connect(url, autocommit=True) as raw:  # what a bad release could have left behind
            raw.execute("UPDATE regions SET options = '{not json' WHERE name = 'broken'")
        service = _start(tmp_path, url)
        with service.client("acme") as c:
            assert [r["name"] for r in c.list_regions()["regions"]] == ["good"]
            assert len(c.get_region("good")["entries"]) == 45
        assert "broken" in service.log()
    finally:
        service.stop()


def test_a_tenant_is_served_by_one_coordinator_and_moves_on_a_clean_stop(tmp_path: Path, url: str) -> None:
    a = _start(tmp_path / "a", url, lease=30.0)
    b = _start(tmp_path / "b", url, lease=30.0)
    try:
        with a.client("acme") as c:
            c.put_script("region_hook", "log", HOOK)
            c.create_region("log", script="log", budget=10_000, persistent=True)
            c.write("log", "by a", tokens=1)
        forwarded = httpx.get(f"{b.url}/api/regions/log", headers=AUTH)  # b forwards it to a, the owner
        assert (
            forwarded.status_code == 200 and f"/{a.process.pid}/" in forwarded.headers["rhaipool-served-by"]
        )
        assert [e["content"] for e in forwarded.json()["entries"]] == ["by a"]
        hop = {"rhaipool-forwarded-by": "elsewhere", **AUTH}  # a forward is never forwarded again
        refused = httpx.get(f"{b.url}/api/regions/log", headers=hop)
        assert refused.status_code == 503 and "served by another coordinator" in refused.text
        assert refused.headers["retry-after"]
        with b.client("globex") as c:  # b serves the tenants nobody else holds
            c.put_script("region_hook", "log", HOOK)
        assert a.stop() == 0  # releases its leases: b takes acme at once, not after 30 s
        begun = time.monotonic()
        assert _entries(b) == ["by a"]  # loaded from the database at its first request
        assert time.monotonic() - begun < 5.0
        with b.client("acme") as c:
            c.write("log", "by b", tokens=1)
        assert _entries(b) == ["by a", "by b"]
    finally:
        a.stop()
        b.stop()


def test_requests_arriving_while_a_new_owner_loads_the_tenant_wait_for_it(tmp_path: Path, url: str) -> None:
    """The lease is taken before the tenant's state is read: requests that arrive in between wait for
    the load instead of being served from a tenant not there yet (404 for a region the database holds)."""
    a = _start(tmp_path / "a", url)
    try:
        with a.client("acme") as c:
            c.put_script("region_hook", "log", HOOK)
            for r in range(8):  # enough state that reading it takes a while
                c.create_region(f"log{r}", script="log", budget=10_000_000, persistent=True)
                for i in range(10):
                    c.write(f"log{r}", f"{i}-" + "z" * 100_000, tokens=1)
    finally:
        assert a.stop() == 0  # a clean stop gives the lease up: b takes it at the first request
    b = _start(tmp_path / "b", url)
    try:
        barrier = threading.Barrier(16)
        answers: list[int] = []

        def read(r: int) -> None:
            barrier.wait()
            answers.append(httpx.get(f"{b.url}/api/regions/log{r % 8}", headers=AUTH, timeout=60).status_code)

        threads = [threading.Thread(target=read, args=(r,)) for r in range(16)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert answers == [200] * 16, answers
    finally:
        b.stop()


def test_a_paused_owner_comes_back_to_refused_writes(tmp_path: Path, url: str) -> None:
    a = _start(tmp_path / "a", url)
    b = _start(tmp_path / "b", url)
    try:
        with a.client("acme") as c:
            c.put_script("region_hook", "log", HOOK)
            c.create_region("log", script="log", budget=10_000, persistent=True)
            c.write("log", "by a", tokens=1)
        a.process.send_signal(signal.SIGSTOP)  # paused (a long GC, a frozen VM): its lease runs out
        try:
            _wait(
                lambda: httpx.get(f"{b.url}/api/regions/log", headers=AUTH).status_code == 200,
                10,
                "b takes acme",
            )
            with b.client("acme") as c:
                c.write("log", "by b", tokens=1)
        finally:
            a.process.send_signal(signal.SIGCONT)
        hop = {"rhaipool-forwarded-by": "elsewhere", **AUTH}  # as if forwarded: a must not serve it
        stale = httpx.post(
            f"{a.url}/api/regions/log/write", json={"content": "stale", "tokens": 1}, headers=hop
        )
        assert stale.status_code == 503 and "served by another coordinator" in stale.text, stale.text
        assert _entries(b) == ["by a", "by b"]  # nothing of the stale owner's
        assert "tenant acme dropped" in a.log()
        late = httpx.post(  # a plain request to a now reaches the new owner
            f"{a.url}/api/regions/log/write", json={"content": "late", "tokens": 1}, headers=AUTH
        )
        assert late.status_code == 200 and f"/{b.process.pid}/" in late.headers["rhaipool-served-by"]
        assert _entries(b) == ["by a", "by b", "late"]
    finally:
        a.stop()
        b.stop()


def _serves(service: ServiceProcess) -> Callable[[], bool]:
    region = f"{service.url}/api/regions/log"
    return lambda: httpx.get(region, headers=AUTH).status_code == 200


@pytest.mark.slow
def test_kill_9_of_the_owner_loses_no_acknowledged_write_and_the_other_takes_over(
    tmp_path: Path, url: str
) -> None:
    """Writes go to the tenant's owner; it is ``kill -9``ed at random moments and the client moves to
    the other coordinator (what a load balancer's health check does), which serves the tenant once the
    dead one's lease ran out. Every acknowledged write is there once, in order; a write whose answer was
    lost is there at most once; the take-over takes about one lease."""
    rng = random.Random(7)
    folders = [tmp_path / "a", tmp_path / "b"]
    live = [_start(folders[0], url), _start(folders[1], url)]
    with live[0].client("acme") as c:
        c.put_script("region_hook", "log", HOOK)
        c.create_region("log", script="log", budget=10_000_000, persistent=True)
    acked: list[int] = []
    maybe: list[int] = []
    takeovers: list[float] = []
    killed: list[float] = []  # when each kill -9 was sent
    owner, i = 0, 0
    try:
        for _kill in range(4):

            def kill(process: subprocess.Popen[bytes] = live[owner].process) -> None:
                killed.append(time.monotonic())
                process.kill()

            timer = threading.Timer(rng.uniform(0.3, 1.5), kill)
            timer.start()
            with live[owner].client("acme") as c:
                while True:
                    try:
                        c.write("log", f"w{i}", tokens=1)
                    except ServiceError:
                        maybe.append(i)
                        i += 1
                        break
                    acked.append(i)
                    i += 1
            timer.join()
            live[owner].kill9()
            owner = 1 - owner
            _wait(_serves(live[owner]), 4 * LEASE, "a take-over")
            takeovers.append(time.monotonic() - killed[-1])
            live[1 - owner] = _start(folders[1 - owner], url)  # back, as the spare
        entries = _entries(live[owner])
    finally:
        for service in live:
            service.stop()
    written = [int(e[1:]) for e in entries]
    assert len(written) == len(set(written)), "an entry is there twice"
    assert written == sorted(written), "entries out of order"
    assert set(acked) <= set(written), f"acknowledged writes lost: {sorted(set(acked) - set(written))}"
    assert set(written) <= set(acked) | set(maybe)
    assert len(acked) > 20
    print("take-overs after kill -9 (s):", " ".join(f"{t:.2f}" for t in takeovers))
    assert max(takeovers) < LEASE + 3.0, takeovers


def test_tenants_added_and_revoked_on_one_coordinator_reach_the_others(tmp_path: Path, url: str) -> None:
    a = _start(tmp_path / "a", url)
    b = _start(tmp_path / "b", url)
    token = "newco-secret-token"
    try:
        with a.client(None) as admin:
            admin.put_tenant("newco", sha(token))
        with Client(b.url, token) as c:
            _wait(
                lambda: (
                    httpx.get(
                        f"{b.url}/api/scripts", headers={"Authorization": f"Bearer {token}"}
                    ).status_code
                    == 200
                ),
                5 * LEASE,
                "b knows newco's token",
            )
            c.put_script("region_hook", "log", HOOK)  # b owns newco now
        with b.client(None) as admin:
            admin.delete_tenant("newco")
        scripts = f"{a.url}/api/scripts"
        _wait(
            lambda: httpx.get(scripts, headers={"Authorization": f"Bearer {token}"}).status_code == 401,
            5 * LEASE,
            "a refuses the revoked token",
        )
    finally:
        a.stop()
        b.stop()


class _Link:
    """A TCP forwarder between a coordinator and PostgreSQL that the test can cut: its connections
    end and new ones are refused, as when the database's host becomes unreachable."""

    def __init__(self, port: int) -> None:
        self.target = port
        self.server = socket.create_server(("127.0.0.1", 0))
        self.port = self.server.getsockname()[1]
        self.cut = threading.Event()
        self.sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.server.accept()
            except OSError:
                return
            if self.cut.is_set():
                client.close()
                continue
            upstream = socket.create_connection(("127.0.0.1", self.target))
            self.sockets += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)

    def partition(self) -> None:
        self.cut.set()
        for s in self.sockets:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()
        self.sockets.clear()

    def close(self) -> None:
        self.partition()
        self.server.close()


def test_a_coordinator_cut_off_from_the_database_stops_serving(
    tmp_path: Path, postgres: PostgresServer
) -> None:
    url = postgres.fresh()
    link = _Link(postgres.port)
    service = _start(tmp_path, url.replace(f":{postgres.port}/", f":{link.port}/"))
    try:
        with service.client("acme") as c:
            c.put_script("region_hook", "log", HOOK)
            c.create_region("log", script="log", budget=10_000, persistent=True)
        link.partition()
        _wait(lambda: httpx.get(f"{service.url}/readyz").status_code == 503, 20, "readiness false")
        assert "database" in httpx.get(f"{service.url}/readyz").text
        region = f"{service.url}/api/regions/log"
        _wait(lambda: httpx.get(region, headers=AUTH).status_code == 503, 2 * LEASE, "memory not served")
        with service.client("acme") as c, pytest.raises(ServiceError) as refused:
            c.write("log", "lost", tokens=1)
        assert refused.value.status == 503
        link.cut.clear()
        _wait(lambda: httpx.get(f"{service.url}/readyz").status_code == 200, 30, "ready again")
        assert _entries(service) == []
    finally:
        service.stop()
        link.close()
