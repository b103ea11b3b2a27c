"""Nodes across real network boundaries on one machine: a coordinator namespace, two node namespaces.

The coordinator (a ``Pool`` with no local worker and a ``NodeListener`` on ``tcp://0.0.0.0``) runs in
this process, in a thread inside ``rpn-c``; each node is the real ``rhaipool node`` under ``ip netns
exec``, joining over its own veth link.  Shown: calls served by both nodes; a node killed mid-load
with every call ending exactly once; a partition (link down, then up) detected and healed; unknown
and revoked keys refused; and a packet capture on a link that sees the handshake and the calls but
none of their plaintext (while it does see a plain-TCP peer's bytes).
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from node_cluster import REPO, Keys, NodeProcess, active_by_node, make_keys, wait_for

from coordinator import Pool, PoolConfig
from coordinator.bench.netns import Topology
from coordinator.nodes.keys import revoke
from coordinator.nodes.link import NodeListener

PORT = 47231
ECHO = "fn echo(s, v) { sleep(s); v }"
JOIN = 45.0
_ETH_P_ALL = 0x0003


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return make_keys(tmp_path / "keys", strangers=("stranger",))


def run_in_coordinator(topology: Topology, scenario: Callable[[], Coroutine[Any, Any, None]]) -> None:
    topology.run_inside(topology.coordinator, lambda: asyncio.run(asyncio.wait_for(scenario(), 120)))


def start_node(topology: Topology, keys: Keys, index: int, name: str, workers: int = 2) -> NodeProcess:
    join = f"tcp://{topology.coordinator_address(index)}:{PORT}"
    return NodeProcess(join, keys, name, workers, prefix=topology.exec_prefix(topology.node(index)))


@asynccontextmanager
async def cluster(
    topology: Topology, keys: Keys
) -> AsyncIterator[tuple[Pool, NodeListener, list[NodeProcess]]]:
    listener = NodeListener(f"tcp://0.0.0.0:{PORT}", keys.coordinator_secret, keys.authorized)
    nodes: list[NodeProcess] = []
    try:
        async with Pool(PoolConfig(workers=0, spares=0), nodes=listener) as pool:
            nodes += [start_node(topology, keys, 1, "n1"), start_node(topology, keys, 2, "n2")]
            want = {"n1": 2, "n2": 2}
            await wait_for(lambda: active_by_node(pool, listener) == want, JOIN, f"{want} ACTIVE")
            yield pool, listener, nodes
    finally:  # after the pool: it SHUTDOWNs the nodes' workers through the link, then RESETs the nodes
        for node in nodes:
            node.close()


def holds_calls(pool: Pool, listener: NodeListener, name: str) -> Callable[[], bool]:
    return lambda: any(listener.worker_nodes.get(w.id) == name and w.inflight for w in pool.workers())


def capture_socket(device: str) -> socket.socket:
    """A raw packet socket on ``device`` (opened in the coordinator's namespace): a packet capture."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(_ETH_P_ALL))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((device, 0))
    sock.setblocking(False)
    return sock


def captured(sock: socket.socket) -> bytes:
    frames = []
    while True:
        try:
            frames.append(sock.recv(65536))
        except BlockingIOError:
            return b"".join(frames)


def test_calls_are_served_by_both_nodes_and_the_link_carries_no_plaintext(
    links_up: Topology, keys: Keys
) -> None:
    marker = "PLAINTEXT-MARKER-7c1e"

    async def scenario() -> None:
        capture = capture_socket(links_up.link_name(1))
        async with cluster(links_up, keys) as (pool, listener, _nodes):
            handle = await pool.load(ECHO)
            results = await asyncio.gather(
                *(pool.call_detailed(handle, "echo", 0, f"{marker}{i}") for i in range(60))
            )
            assert [r.value for r in results] == [f"{marker}{i}" for i in range(60)]
            assert {listener.worker_nodes[r.worker_id] for r in results} == {"n1", "n2"}
            # A plain-TCP peer on the same link: its bytes are visible on the wire, and it gets nothing back.
            command = [*links_up.exec_prefix(links_up.node(1)), sys.executable, "-c", PLAIN_PEER]
            peer = await asyncio.create_subprocess_exec(
                *command, "10.231.1.1", str(PORT), stdout=asyncio.subprocess.PIPE, cwd=REPO
            )
            out, _ = await asyncio.wait_for(peer.communicate(), 30)
            assert peer.returncode == 0
            assert b"got no payload" in out, out
        wire = captured(capture)
        capture.close()
        assert wire.count(b"PLAIN-PEER-CONTROL") >= 1  # the capture does see payloads on this link
        assert len(wire) > 5_000  # ...and saw the node link's traffic (handshake, READYs, calls)
        assert marker.encode() not in wire  # ...none of it in the clear

    run_in_coordinator(links_up, scenario)


PLAIN_PEER = """
import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.sendall(b"PLAIN-PEER-CONTROL" * 8)
s.settimeout(2)
data = b""
try:
    while chunk := s.recv(4096):
        data += chunk
except (TimeoutError, ConnectionResetError):
    pass
# a ZMTP greeting (64 bytes, no payload) at most: a CURVE server says nothing else to a plain peer
print("got no payload" if len(data) <= 64 else f"got {data!r}")
"""


def test_a_node_killed_mid_load_every_call_ends_exactly_once(links_up: Topology, keys: Keys) -> None:
    async def scenario() -> None:
        async with cluster(links_up, keys) as (pool, listener, nodes):
            handle = await pool.load(ECHO)
            calls = [asyncio.ensure_future(pool.call(handle, "echo", 0.1, i)) for i in range(60)]
            await wait_for(holds_calls(pool, listener, "n1"), 30, "calls running on n1")
            nodes[0].signal(signal.SIGKILL)
            results = await asyncio.gather(*calls, return_exceptions=True)
            assert results == list(range(60))
            assert listener.expired == 1 and pool.statistics().retries >= 1

    run_in_coordinator(links_up, scenario)


def test_a_partition_is_detected_and_healed(links_up: Topology, keys: Keys) -> None:
    async def scenario() -> None:
        async with cluster(links_up, keys) as (pool, listener, _nodes):
            handle = await pool.load(ECHO)
            calls = [asyncio.ensure_future(pool.call(handle, "echo", 0.1, i)) for i in range(40)]
            await wait_for(holds_calls(pool, listener, "n1"), 30, "calls running on n1")
            links_up.set_link(1, up=False)
            cut = time.monotonic()
            await wait_for(lambda: listener.expired == 1, 10, "n1 expired")
            detected = time.monotonic() - cut
            assert await asyncio.gather(*calls, return_exceptions=True) == list(range(40))
            links_up.set_link(1, up=True)
            await wait_for(lambda: active_by_node(pool, listener)["n1"] == 2, JOIN, "n1 rejoined")
            assert listener.joined == 3
            results = await asyncio.gather(*(pool.call_detailed(handle, "echo", 0, i) for i in range(60)))
            assert {listener.worker_nodes[r.worker_id] for r in results} == {"n1", "n2"}
            assert detected < 3.0 + 1.0  # the 3 s bound, plus slack for a shared machine

    run_in_coordinator(links_up, scenario)


def test_unknown_and_revoked_keys_are_refused(links_up: Topology, keys: Keys) -> None:
    async def scenario() -> None:
        listener = NodeListener(f"tcp://0.0.0.0:{PORT}", keys.coordinator_secret, keys.authorized)
        async with Pool(PoolConfig(workers=0, spares=0), nodes=listener) as pool:
            revoke(keys.authorized, "n3")
            nodes = [start_node(links_up, keys, 1, "stranger", 1), start_node(links_up, keys, 2, "n3", 1)]
            try:
                await asyncio.sleep(4.0)  # several attempts each; none may pass the handshake
                assert listener.joined == 0 and listener.nodes() == [] and pool.workers() == []
                assert all(node.process.poll() is None for node in nodes)  # they keep trying, backing off
            finally:
                logs = [node.close() for node in nodes]
            assert all("joined" not in log for log in logs), logs

    run_in_coordinator(links_up, scenario)
