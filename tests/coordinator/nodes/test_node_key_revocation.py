"""Node keys die when revoked (issue 21): real ``rhaipool node`` processes joined to a coordinator.

A key revoked with ``rhaipool keys revoke`` (a rename into ``revoked/``) or deleted (a Kubernetes Secret
update) is refused at the node's next handshake, and a node already joined with it is dropped within one
heartbeat: its calls end as a dead node's do (each one answered, the pure ones re-run elsewhere), while
the other nodes keep serving. A node that keeps its old connection open and says HELLO again on it is
refused too.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import zmq
import zmq.asyncio

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from node_cluster import REPO, Keys, NodeProcess, active_by_node, make_keys, wait_for

from coordinator import Pool, PoolConfig
from coordinator.nodes.auth import curve_client
from coordinator.nodes.link import LinkSettings, NodeListener
from proto import SUPPORTED_VERSIONS
from proto.nodes import Hello, Reset, Welcome, decode_node, encode_node

SLOW = "fn slow(s, v) { sleep(s); v }"
JOIN_TIMEOUT = 30.0
HEARTBEAT = 0.5
SLACK = 1.0
"""Scheduling slack on a loaded, shared machine; still well under the 2.5 s a silent node is given."""


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return make_keys(tmp_path / "keys")


@asynccontextmanager
async def cluster(
    keys: Keys, authorized: Path | None = None
) -> AsyncIterator[tuple[Pool, NodeListener, dict[str, NodeProcess]]]:
    settings = LinkSettings(heartbeat=HEARTBEAT, liveness=2.5)
    listener = NodeListener(
        "tcp://127.0.0.1:*", keys.coordinator_secret, authorized or keys.authorized, settings
    )
    nodes: dict[str, NodeProcess] = {}
    try:
        async with Pool(PoolConfig(workers=0, spares=0), nodes=listener) as pool:
            for name in ("n1", "n2"):
                nodes[name] = NodeProcess(listener.endpoint, keys, name, workers=2)
            want = {"n1": 2, "n2": 2}
            await wait_for(lambda: active_by_node(pool, listener) == want, JOIN_TIMEOUT, f"{want} ACTIVE")
            yield pool, listener, nodes
    finally:
        for node in nodes.values():
            node.close()


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())  # type: ignore[arg-type]


def joined(listener: NodeListener) -> set[str]:
    return {n.name for n in listener.nodes()}


def refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "refused node key" in r.getMessage()]


async def keys_cli(*args: str | Path) -> None:
    """The installed command, as an operator runs it (off the loop: the pool keeps serving meanwhile)."""
    command = [sys.executable, "-m", "coordinator", "keys", *map(str, args)]
    done = await asyncio.to_thread(
        subprocess.run, command, cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr


def test_a_joined_node_whose_key_is_revoked_is_dropped_within_a_heartbeat_and_no_call_is_lost(
    keys: Keys, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        async with cluster(keys) as (pool, listener, nodes):
            handle = await pool.load(SLOW)
            calls = [asyncio.ensure_future(pool.call_detailed(handle, "slow", 0.2, i)) for i in range(40)]
            await wait_for(
                lambda: any(listener.worker_nodes.get(w.id) == "n1" and w.inflight for w in pool.workers()),
                20,
                "calls running on n1",
            )
            await keys_cli("revoke", keys.authorized, "n1")
            revoked = time.monotonic()
            await wait_for(lambda: "n1" not in joined(listener), 10, "n1 dropped")
            dropped = time.monotonic() - revoked
            results = await asyncio.gather(*calls, return_exceptions=True)
            assert [r.value for r in results] == list(range(40)), results  # type: ignore[union-attr]
            assert dropped < HEARTBEAT + SLACK
            assert (listener.dropped_keys, listener.expired) == (1, 1)
            # n1 keeps trying (a fresh connection, so a fresh handshake): refused, it never joins again
            await asyncio.sleep(3.0)
            assert joined(listener) == {"n2"} and listener.joined == 2
            assert nodes["n1"].process.poll() is None
            late = await asyncio.gather(*(pool.call_detailed(handle, "slow", 0, i) for i in range(20)))
            assert {listener.worker_nodes[r.worker_id] for r in late} == {"n2"}
            assert [r.value for r in late] == list(range(20))

    with caplog.at_level(logging.WARNING, logger="coordinator.nodes"):
        run(scenario)
    assert any("node n1: its key" in r.getMessage() and "revoked" in r.getMessage() for r in caplog.records)
    assert len(refusals(caplog)) == 1  # its handshakes after the drop, said once


def test_a_key_deleted_by_a_secret_update_drops_its_node_and_admits_it_again_once_restored(
    keys: Keys, tmp_path: Path
) -> None:
    """Kubernetes revokes by updating the Secret: the mounted files are links swapped all at once."""
    mounted = tmp_path / "mounted"
    mounted.mkdir()
    files = {name: (keys.authorized / name).read_text() for name in ("n1.key", "n2.key")}
    kubelet_update(mounted, files, 1)

    async def scenario() -> None:
        async with cluster(keys, authorized=mounted) as (pool, listener, _nodes):
            kubelet_update(mounted, {"n1.key": files["n1.key"]}, 2)  # n2's key removed from the Secret
            removed = time.monotonic()
            await wait_for(lambda: "n2" not in joined(listener), 10, "n2 dropped")
            assert time.monotonic() - removed < HEARTBEAT + SLACK
            handle = await pool.load(SLOW)
            served = await asyncio.gather(*(pool.call_detailed(handle, "slow", 0, i) for i in range(20)))
            assert {listener.worker_nodes[r.worker_id] for r in served} == {"n1"}
            await asyncio.sleep(2.0)
            assert joined(listener) == {"n1"} and listener.joined == 2
            kubelet_update(mounted, files, 3)  # the key is back: its next attempt gets in
            await wait_for(lambda: active_by_node(pool, listener)["n2"] == 2, JOIN_TIMEOUT, "n2 back")
            assert listener.joined == 3

    run(scenario)


def test_a_node_that_keeps_its_connection_cannot_join_again_on_it(keys: Keys) -> None:
    """A revoked node that ignores the RESET and says HELLO again over its authenticated connection."""

    async def scenario() -> None:
        listener = NodeListener(
            "tcp://127.0.0.1:*", keys.coordinator_secret, keys.authorized, LinkSettings(heartbeat=HEARTBEAT)
        )
        async with Pool(PoolConfig(workers=0, spares=0), nodes=listener):
            context = zmq.asyncio.Context()
            dealer = context.socket(zmq.DEALER)
            try:
                curve_client(dealer, keys.node_secrets["n3"], keys.coordinator_public)  # type: ignore[arg-type]
                dealer.connect(listener.endpoint)
                hello = encode_node(Hello("rogue", 1, 1, sorted(SUPPORTED_VERSIONS)))
                await dealer.send_multipart([hello])
                assert isinstance(await next_message(dealer, Welcome, Reset), Welcome)
                assert joined(listener) == {"rogue"}
                (keys.authorized / "n3.key").unlink()
                reset = await next_message(dealer, Reset)
                assert isinstance(reset, Reset) and "not authorized" in reset.reason
                assert joined(listener) == set()
                await dealer.send_multipart([hello])  # the same connection, the same session
                again = await next_message(dealer, Welcome, Reset)
                assert isinstance(again, Reset) and "not authorized" in again.reason
                assert (listener.joined, listener.refused_keys, joined(listener)) == (1, 1, set())
            finally:
                dealer.close(0)
                context.term()

    run(scenario)


async def next_message(dealer: zmq.asyncio.Socket, *kinds: type) -> object:
    """The next node message of one of ``kinds`` (heartbeats skipped)."""
    while True:
        message = decode_node(await asyncio.wait_for(dealer.recv_multipart(), 10))
        if isinstance(message, kinds):
            return message


def kubelet_update(directory: Path, files: dict[str, str], generation: int) -> None:
    """What the kubelet does to a mounted Secret: a new ``..<ts>`` folder, ``..data`` swapped, links fixed."""
    fresh = directory / f"..gen{generation}"
    fresh.mkdir()
    for name, text in files.items():
        (fresh / name).write_text(text)
    (directory / "..data_tmp").symlink_to(fresh.name)
    (directory / "..data_tmp").rename(directory / "..data")
    for name in files:
        if not (directory / name).is_symlink():
            (directory / name).symlink_to(f"..data/{name}")
    for stale in directory.iterdir():
        if stale.is_symlink() and stale.name not in files and not stale.name.startswith(".."):
            stale.unlink()
    for old in directory.glob("..gen*"):
        if old.name != fresh.name:
            shutil.rmtree(old)
