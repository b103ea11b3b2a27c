"""A coordinator pool with real ``rhaipool node`` processes: keys, node processes, waits.

Shared by ``tests/coordinator/nodes`` (nodes on 127.0.0.1) and ``tests/netns`` (nodes in network
namespaces, started through ``ip netns exec``).  Nothing here is mocked: the nodes are the real
command, joining over CurveZMQ, running real sandboxed workers.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from coordinator import Pool
from coordinator.nodes.keys import generate
from coordinator.nodes.link import NodeListener

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Keys:
    """The coordinator's pair, an authorized-keys directory, and node secrets (some never authorized)."""

    root: Path
    coordinator_secret: Path
    coordinator_public: Path
    authorized: Path
    node_secrets: dict[str, Path] = field(default_factory=dict)


def make_keys(
    root: Path, authorized: Sequence[str] = ("n1", "n2", "n3"), strangers: Sequence[str] = ()
) -> Keys:
    (root / "coordinator").mkdir(parents=True)
    (root / "nodes").mkdir()
    (root / "authorized").mkdir()
    public, secret = generate(root / "coordinator", "coordinator")
    keys = Keys(root, secret, public, root / "authorized")
    for name in (*authorized, *strangers):
        node_public, node_secret = generate(root / "nodes", name)
        keys.node_secrets[name] = node_secret
        if name in authorized:
            shutil.copy(node_public, keys.authorized / node_public.name)
    return keys


class NodeProcess:
    """``rhaipool node --join ...`` as a child process (optionally inside ``prefix``,
    e.g. ``ip netns exec``)."""

    def __init__(
        self, join: str | Sequence[str], keys: Keys, name: str, workers: int = 2, prefix: Sequence[str] = (),
        secret: Path | None = None, group: str = "",
    ) -> None:  # fmt: skip
        self.name = name
        joins = [join] if isinstance(join, str) else list(join)
        command = [*prefix, sys.executable, "-m", "coordinator", "node"]
        command += [arg for each in joins for arg in ("--join", each)]
        command += ["--secret-key", str(secret or keys.node_secrets[name]), "--server-key"]
        command += [str(keys.coordinator_public), "--workers", str(workers), "--name", name]
        command += ["--group", group] if group else []
        # Its log goes to a file: a pipe read only at close() fills up (64 KiB) on a chatty node and
        # blocks it mid-log, so it stops heartbeating and looks dead.
        self._log = tempfile.TemporaryFile(mode="w+", prefix=f"rhaipool-node-{name}-")  # noqa: SIM115 - close()
        self.process = subprocess.Popen(command, cwd=REPO, stderr=self._log, text=True)

    def signal(self, sig: int) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, sig)

    async def wait(self, timeout: float) -> int | None:
        deadline = time.monotonic() + timeout
        while self.process.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return self.process.poll()

    def close(self) -> str:
        """Kill it (its workers die with it: PDEATHSIG) and return its log."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)
        self._log.seek(0)
        log = self._log.read()
        self._log.close()
        return log


async def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    """Wait until ``predicate()`` holds (a generous bound: the machine is shared)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout:g} s: {what}")
        await asyncio.sleep(0.02)


def active_by_node(pool: Pool, listener: NodeListener) -> Counter[str]:
    """ACTIVE workers per node name (local workers count under ``""``)."""
    return Counter(listener.worker_nodes.get(w.id, "") for w in pool.workers() if w.state == "active")
