"""Nodes joining a pool over CurveZMQ on 127.0.0.1: calls on both, expiry and rerouting, drain, refusal.

Every node is the real ``rhaipool node`` command with real sandboxed workers; the coordinator is a
``Pool`` with ``workers=0`` (every call runs on nodes) and a ``NodeListener``.  The network-boundary
versions (namespaces, partitions, packet capture) are in ``tests/netns``.
"""

from __future__ import annotations

import asyncio
import signal
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from node_cluster import Keys, NodeProcess, active_by_node, make_keys, wait_for

from coordinator import Deadlines, Pool, PoolConfig
from coordinator.egress import Egress, EgressPolicy, EnvResolver
from coordinator.errors import ScriptTimeout
from coordinator.nodes.keys import revoke
from coordinator.nodes.link import LinkSettings, NodeListener
from coordinator.providers.host import ProviderHost

HOOK = "fn f(x) { x + 1 }"
SLOW = "fn slow(s, v) { sleep(s); v }"
JOIN_TIMEOUT = 30.0


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return make_keys(tmp_path / "keys", strangers=("stranger",))


@asynccontextmanager
async def cluster(
    keys: Keys, names: tuple[str, ...] = ("n1", "n2"), workers: int = 2, **config: Any
) -> AsyncIterator[tuple[Pool, NodeListener, dict[str, NodeProcess]]]:
    listener = NodeListener("tcp://127.0.0.1:*", keys.coordinator_secret, keys.authorized, LinkSettings())
    nodes: dict[str, NodeProcess] = {}
    try:
        async with Pool(PoolConfig(workers=0, spares=0, **config), nodes=listener) as pool:
            for name in names:
                nodes[name] = NodeProcess(listener.endpoint, keys, name, workers)
            expected = dict.fromkeys(names, workers)
            await wait_for(
                lambda: active_by_node(pool, listener) == expected, JOIN_TIMEOUT, f"{expected} ACTIVE"
            )
            yield pool, listener, nodes
    finally:  # after the pool: it SHUTDOWNs the nodes' workers through the link, then RESETs the nodes
        for node in nodes.values():
            print(f"--- node {node.name}:\n{node.close()[-3000:]}")  # shown when the test fails


def run(scenario: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(scenario())  # type: ignore[arg-type]


def test_calls_are_served_by_both_nodes(keys: Keys) -> None:
    async def scenario() -> None:
        async with cluster(keys) as (pool, listener, _nodes):
            handle = await pool.load(HOOK)
            results = await asyncio.gather(*(pool.call_detailed(handle, "f", i) for i in range(200)))
            assert [r.value for r in results] == [i + 1 for i in range(200)]
            served = {listener.worker_nodes[r.worker_id] for r in results}
            assert served == {"n1", "n2"}
            assert {n.name: n.workers for n in listener.nodes()} == {"n1": 2, "n2": 2}

    run(scenario)


def holds_calls(pool: Pool, listener: NodeListener, node: str) -> Callable[[], bool]:
    return lambda: any(listener.worker_nodes.get(w.id) == node and w.inflight for w in pool.workers())


def test_a_node_killed_mid_load_is_expired_within_3_s_and_every_call_ends_once(keys: Keys) -> None:
    async def scenario() -> None:
        async with cluster(keys) as (pool, listener, nodes):
            handle = await pool.load(SLOW)
            calls = [asyncio.ensure_future(pool.call(handle, "slow", 0.2, i)) for i in range(40)]
            await wait_for(holds_calls(pool, listener, "n1"), 20, "calls running on n1")
            nodes["n1"].signal(signal.SIGKILL)  # the node and (PDEATHSIG) its workers: silence, no goodbye
            killed = time.monotonic()
            await wait_for(lambda: "n1" not in {n.name for n in listener.nodes()}, 10, "n1 expired")
            noticed = time.monotonic() - killed
            results = await asyncio.gather(*calls, return_exceptions=True)
            assert results == list(range(40))  # each exactly once, by its own future
            assert listener.expired == 1
            assert noticed < 3.0 + 1.0  # the 3 s bound, plus scheduling slack on a shared machine
            assert pool.statistics().retries >= 1  # the pure hooks that were on n1 re-ran on n2

    run(scenario)


def test_nodes_join_and_leave_while_calls_flow_and_sigterm_loses_no_accepted_call(keys: Keys) -> None:
    async def scenario() -> None:
        async with cluster(keys) as (pool, listener, nodes):
            handle = await pool.load(SLOW)
            calls = [asyncio.ensure_future(pool.call_detailed(handle, "slow", 0.1, i)) for i in range(60)]
            await wait_for(holds_calls(pool, listener, "n1"), 20, "calls running on n1")
            nodes["n1"].signal(signal.SIGTERM)  # leaves: drains first
            nodes["n3"] = NodeProcess(listener.endpoint, keys, "n3", workers=2)  # joins meanwhile
            results = await asyncio.gather(*calls, return_exceptions=True)
            assert [r.value for r in results] == list(range(60)), results  # type: ignore[union-attr]
            assert await nodes["n1"].wait(20) == 0
            assert pool.statistics().retries == 0  # each finished where it was accepted, none re-ran
            await wait_for(lambda: active_by_node(pool, listener)["n3"] == 2, JOIN_TIMEOUT, "n3 joined")
            assert sorted(n.name for n in listener.nodes()) == ["n2", "n3"]  # n3 may start slowly
            late = await asyncio.gather(*(pool.call_detailed(handle, "slow", 0, i) for i in range(40)))
            assert {listener.worker_nodes[r.worker_id] for r in late} == {"n2", "n3"}

    run(scenario)


def test_a_node_that_loses_the_coordinator_rejoins_with_fresh_workers(keys: Keys) -> None:
    async def scenario() -> None:
        async with cluster(keys, names=("n1",)) as (pool, listener, nodes):
            nodes["n1"].signal(signal.SIGSTOP)  # silent: the coordinator expires it
            await wait_for(lambda: listener.expired == 1, 10, "n1 expired")
            nodes["n1"].signal(signal.SIGCONT)  # it finds the coordinator silent, starts over, joins again
            await wait_for(lambda: active_by_node(pool, listener)["n1"] == 2, JOIN_TIMEOUT, "n1 back")
            assert listener.joined == 2
            handle = await pool.load(HOOK)
            assert await pool.call(handle, "f", 41) == 42

    run(scenario)


def test_nodes_with_an_unknown_or_a_revoked_key_are_refused(keys: Keys) -> None:
    async def scenario() -> None:
        async with cluster(keys, names=("n1",)) as (_pool, listener, nodes):
            revoke(keys.authorized, "n2")  # while the coordinator runs: no restart
            for name in ("stranger", "n2"):
                nodes[name] = NodeProcess(listener.endpoint, keys, name, workers=1)
            await asyncio.sleep(3.0)  # several HELLO attempts each; none may get through the handshake
            assert listener.joined == 1
            assert {n.name for n in listener.nodes()} == {"n1"}
            assert all(nodes[name].process.poll() is None for name in ("stranger", "n2"))  # still trying

    run(scenario)


def test_two_coordinators_share_one_node(keys: Keys) -> None:
    """Tenants sharded over coordinators, one fleet: the node joins both and splits its workers."""

    async def scenario() -> None:
        a = NodeListener("tcp://127.0.0.1:*", keys.coordinator_secret, keys.authorized)
        b = NodeListener("tcp://127.0.0.1:*", keys.coordinator_secret, keys.authorized)
        config = PoolConfig(workers=0, spares=0)
        node: NodeProcess | None = None
        try:
            async with Pool(config, nodes=a) as pool_a, Pool(config, nodes=b) as pool_b:
                node = NodeProcess([a.endpoint, b.endpoint], keys, "n1", workers=2)
                for pool, listener in ((pool_a, a), (pool_b, b)):
                    await wait_for(
                        lambda p=pool, l=listener: active_by_node(p, l) == {"n1": 1}, JOIN_TIMEOUT, "1 each"
                    )
                for pool in (pool_a, pool_b):
                    handle = await pool.load(HOOK)
                    assert await asyncio.gather(*(pool.call(handle, "f", i) for i in range(20))) == list(
                        range(1, 21)
                    )
        finally:
            if node is not None:
                node.close()

    run(scenario)


def test_a_provider_call_whose_request_left_is_rerun_without_resending_it_when_its_node_dies(
    keys: Keys,
) -> None:
    """The delivery rule across nodes: the request reached the upstream once; the re-run on another
    node is served it from the call's journal, so the call succeeds and the upstream saw it once."""

    async def scenario() -> None:
        connections = 0
        release = asyncio.Event()

        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal connections
            connections += 1
            try:
                await reader.readuntil(b"\r\n\r\n")
                await release.wait()  # answers only once the node is dead
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n\r\nanswered")
                await writer.drain()
            finally:
                writer.close()

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"
        async with server, cluster(keys) as (pool, listener, nodes), Egress() as egress:
            handle = await pool.load("fn hang(url) { http_get(url) }", name="p.rhai", kind="provider")
            policy = EgressPolicy.build("p", egress_allow=("127.0.0.1",))
            host = ProviderHost(egress, policy, EnvResolver.build("p"))
            task = asyncio.ensure_future(pool.call(handle, "hang", url, host=host, timeout=30))
            await wait_for(lambda: connections == 1, 20, "the request reached the server")
            holder = next(w for w in pool.workers() if w.running)
            nodes[listener.worker_nodes[holder.id]].signal(signal.SIGKILL)
            await wait_for(lambda: pool.statistics().retries == 1, 20, "the call was re-run")
            release.set()
            assert await task == "answered"
            assert not host.sent and connections == 1

    run(scenario)


def test_a_tenants_dedicated_workers_are_pinned_to_its_node_group(keys: Keys) -> None:
    async def scenario() -> None:
        listener = NodeListener("tcp://127.0.0.1:*", keys.coordinator_secret, keys.authorized)
        config = PoolConfig(
            workers=0, spares=0, dedicated_workers={"acme": 1}, dedicated_node_groups={"acme": "acme-only"}
        )
        nodes: list[NodeProcess] = []
        try:
            async with Pool(config, nodes=listener) as pool:
                nodes.append(NodeProcess(listener.endpoint, keys, "n1", workers=2))  # shared
                nodes.append(NodeProcess(listener.endpoint, keys, "n2", workers=2, group="acme-only"))
                want = {"n1": 2, "n2": 2}
                await wait_for(lambda: active_by_node(pool, listener) == want, JOIN_TIMEOUT, f"{want}")
                handle = await pool.load(HOOK, tenant="acme")
                acme = await asyncio.gather(
                    *(pool.call_detailed(handle, "f", i, tenant="acme") for i in range(40))
                )
                other = await pool.load(HOOK, tenant="globex")
                rest = await asyncio.gather(
                    *(pool.call_detailed(other, "f", i, tenant="globex") for i in range(40))
                )
                acme_workers = {r.worker_id for r in acme}
                assert len(acme_workers) == 1 and listener.worker_nodes[acme_workers.pop()] == "n2"
                assert all(r.worker_id not in {a.worker_id for a in acme} for r in rest)
                assert {listener.worker_nodes[r.worker_id] for r in rest} == {
                    "n1",
                    "n2",
                }  # n2's other is shared
                assert {n.name: n.group for n in listener.nodes()} == {"n1": "", "n2": "acme-only"}
        finally:
            for node in nodes:
                node.close()

    run(scenario)


def test_the_callers_timeout_bounds_the_answer_when_the_node_goes_silent(keys: Keys) -> None:
    """Deadline, kill grace, then one heartbeat for the node to confirm the kill, not its 2.5 s expiry."""

    async def scenario() -> None:
        grace = Deadlines(kill_grace=0.2)
        async with cluster(keys, names=("n1",), deadlines=grace) as (pool, listener, nodes):
            handle = await pool.load(SLOW)
            begun = time.monotonic()
            task = asyncio.ensure_future(pool.call(handle, "slow", 10, 1, timeout=1.0))
            await wait_for(holds_calls(pool, listener, "n1"), 20, "the call running on n1")
            nodes["n1"].signal(signal.SIGSTOP)  # frozen: it can neither answer nor confirm the kill
            try:
                with pytest.raises(ScriptTimeout):
                    await task
                answered = time.monotonic() - begun
            finally:
                nodes["n1"].signal(signal.SIGCONT)
            bound = 1.0 + 0.2 + listener.settings.heartbeat  # timeout + kill grace + kill confirmation
            assert answered < bound + 0.6  # scheduling slack; the node's expiry would be past 2.5 s

    run(scenario)
