"""Crash and restart: 1 000 writes while the service is ``kill -9``ed at random moments.

Every acknowledged write (a region entry or a stored script) is there after the last restart, exactly
once; a write whose answer was lost to the crash is there at most once; nothing else is; the SQLite
file passes its integrity check.
"""

from __future__ import annotations

import random
import sqlite3
import threading
from pathlib import Path

import pytest
from service_support import ServiceProcess, free_port, write_config

from coordinator.client import Client, ServiceError

WRITES = 1000
KILLS = 5
HOOK = "fn render(ctx) { `${ctx.entries.len()}` }"


def _setup(service: ServiceProcess) -> None:
    with service.client("acme") as c:
        c.put_script("region_hook", "log", HOOK)
        c.create_region("log", script="log", budget=10_000_000, persistent=True)


def _write(client: Client, i: int) -> None:
    if i % 10 == 0:
        client.put_script("region_hook", f"s{i}", f"// {i}\n{HOOK}")
    else:
        report = client.write("log", f"w{i}", tokens=1)
        assert report["outcome"] == "accepted", report


@pytest.mark.slow
def test_every_acknowledged_write_survives_kill_9(tmp_path: Path) -> None:
    rng = random.Random(11)
    port = free_port()
    config = write_config(tmp_path, port=port, workers=1)
    service = ServiceProcess.start(config, port)
    _setup(service)
    acked: list[int] = []
    maybe: list[int] = []
    kills = 0
    timer = threading.Timer(rng.uniform(0.1, 0.8), service.process.kill)
    timer.start()
    client = service.client("acme")
    i = -1
    while (i := i + 1) < WRITES or kills < KILLS:  # at least WRITES writes, and every planned crash
        try:
            _write(client, i)
        except ServiceError:
            maybe.append(i)
            timer.cancel()
            client.close()
            service.kill9()
            kills += 1
            service = ServiceProcess.start(config, port)
            client = service.client("acme")
            if kills < KILLS:
                timer = threading.Timer(rng.uniform(0.1, 0.8), service.process.kill)
                timer.start()
            continue
        acked.append(i)
    timer.cancel()
    client.close()
    service.kill9()
    assert kills == KILLS  # the test did crash the service while it was writing

    service = ServiceProcess.start(config, port)
    with service.client("acme") as c:
        entries = [e["content"] for e in c.get_region("log")["entries"]]
        scripts = {s["name"] for s in c.list_scripts()["scripts"]}
    assert service.stop() == 0

    written = [int(e[1:]) for e in entries]
    assert len(written) == len(set(written)), "an entry is there twice"
    assert written == sorted(written), "entries out of order"
    acked_entries = {i for i in acked if i % 10}
    assert acked_entries <= set(written), f"acknowledged writes lost: {sorted(acked_entries - set(written))}"
    assert set(written) <= acked_entries | set(maybe)
    acked_scripts = {f"s{i}" for i in acked if i % 10 == 0}
    assert acked_scripts <= scripts
    assert scripts <= acked_scripts | {f"s{i}" for i in maybe} | {"log"}
    with sqlite3.connect(tmp_path / "state" / "rhaipool.db") as db:
        assert db.execute("PRAGMA integrity_check").fetchone() == ("ok",)
