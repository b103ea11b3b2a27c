"""A node starts its workers exactly as the pool starts its own (``coordinator._core.processes``).

One pool with one local worker and one real ``rhaipool node`` with one worker: the two processes'
command lines, read from ``/proc``, differ only where they must (the socket each connects to, its
identity, its parent).
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from node_cluster import Keys, NodeProcess, active_by_node, make_keys, wait_for

from coordinator import Limits, Pool, PoolConfig
from coordinator.nodes.link import LinkSettings, NodeListener

_OWN = {"--connect", "--identity", "--parent-pid"}
"""Options whose value is each process's own."""


@pytest.fixture
def keys(tmp_path: Path) -> Keys:
    return make_keys(tmp_path / "keys")


def command_line(pid: int) -> list[str]:
    """``pid``'s argv with the values of ``_OWN`` options blanked."""
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")[:-1]
    return ["*" if i and argv[i - 1] in _OWN else arg for i, arg in enumerate(argv)]


def test_a_node_worker_and_a_local_worker_get_the_same_command_line(keys: Keys) -> None:
    async def scenario() -> None:
        listener = NodeListener("tcp://127.0.0.1:*", keys.coordinator_secret, keys.authorized, LinkSettings())
        config = PoolConfig(workers=1, spares=0, limits=Limits(memory_bytes=700 << 20), resident_max_lists=7)
        node: NodeProcess | None = None
        try:
            async with Pool(config, nodes=listener) as pool:
                node = NodeProcess(listener.endpoint, keys, "n1", 1)
                await wait_for(lambda: active_by_node(pool, listener)["n1"] == 1, 30, "the node's worker")
                remote = [w for w in pool.workers() if w.id in listener.worker_nodes]
                local = [w for w in pool.workers() if w.id not in listener.worker_nodes]
                assert len(remote) == len(local) == 1
                theirs, ours = command_line(remote[0].pid), command_line(local[0].pid)
                assert theirs == ours
                assert ours[ours.index("--memory-bytes") + 1] == str(700 << 20)
                assert ours[ours.index("--resident-lists") + 1] == "7"
        finally:
            if node is not None:
                node.close()

    asyncio.run(scenario())
