"""Network namespaces joined by veth pairs: a coordinator and its nodes on one machine, across real links.

    ┌ rpn-c (coordinator) ┐  veth   ┌ rpn-1 (node) ┐
    │  rpn-c1 10.231.1.1  ├─────────┤ 10.231.1.2   │
    │  rpn-c2 10.231.2.1  ├──┐      └──────────────┘
    └─────────────────────┘  │      ┌ rpn-2 (node) ┐
                             └──────┤ 10.231.2.2   │
                                    └──────────────┘

Used by ``tests/netns`` and ``rhaipool bench nodes``; needs root and iproute2 (``ip``).  The
coordinator side runs in this process, in a thread that entered the coordinator's namespace
(``setns``; Python 3.11 has no ``os.setns``, so through libc), so a test can drive a ``Pool`` directly;
nodes run through ``ip netns exec``.  ``destroy`` removes every namespace of the prefix (deleting a
namespace deletes its veth ends), also leftovers of an earlier run that died.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, TypeVar

__all__ = ["Topology", "netns_unavailable"]

T = TypeVar("T")
_CLONE_NEWNET: Final = 0x40000000


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check, timeout=30)


def netns_unavailable() -> str | None:
    """Why namespaces cannot be made here (the precise reason a test skips with), or ``None``."""
    if shutil.which("ip") is None:
        return "iproute2 is not installed (no `ip` command): apt-get install iproute2"
    if os.geteuid() != 0:
        return "network namespaces need root (CI runs the suite as root)"
    probe = f"rpn-probe-{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"`ip netns add` fails in this sandbox: {made.stderr.strip()}"
    _ip("netns", "del", probe, check=False)
    return None


@dataclass
class Topology:
    """A coordinator namespace and ``nodes`` node namespaces, each joined to it by its own veth pair."""

    nodes: int = 2
    prefix: str = "rpn"

    @property
    def coordinator(self) -> str:
        return f"{self.prefix}-c"

    def node(self, index: int) -> str:
        """Namespace of node ``index`` (1-based)."""
        return f"{self.prefix}-{index}"

    def coordinator_address(self, index: int) -> str:
        """The coordinator's address on node ``index``'s link (what that node joins)."""
        return f"10.231.{index}.1"

    def link_name(self, index: int) -> str:
        return f"{self.prefix}-c{index}"

    def exec_prefix(self, namespace: str) -> list[str]:
        return ["ip", "netns", "exec", namespace]

    def create(self) -> None:
        self.destroy()
        _ip("netns", "add", self.coordinator)
        _ip("-n", self.coordinator, "link", "set", "lo", "up")
        for index in range(1, self.nodes + 1):
            ns, here, there = self.node(index), self.link_name(index), f"{self.prefix}-n{index}"
            _ip("netns", "add", ns)
            _ip(
                "link",
                "add",
                here,
                "netns",
                self.coordinator,
                "type",
                "veth",
                "peer",
                "name",
                there,
                "netns",
                ns,
            )
            _ip("-n", self.coordinator, "addr", "add", f"10.231.{index}.1/24", "dev", here)
            _ip("-n", ns, "addr", "add", f"10.231.{index}.2/24", "dev", there)
            for namespace, device in ((self.coordinator, here), (ns, there), (ns, "lo")):
                _ip("-n", namespace, "link", "set", device, "up")

    def set_link(self, index: int, up: bool) -> None:
        """Cut (or restore) node ``index``'s link: a partition, as a pulled cable looks."""
        _ip("-n", self.coordinator, "link", "set", self.link_name(index), "up" if up else "down")

    def destroy(self) -> None:
        listed = _ip("netns", "list", check=False).stdout.split("\n")
        for line in listed:
            name = line.split(" ")[0]
            if name.startswith(f"{self.prefix}-"):
                _ip("netns", "del", name, check=False)

    def run_inside(self, namespace: str, work: Callable[[], T]) -> T:
        """``work()`` in a thread that entered ``namespace`` (sockets it opens live there); its result."""
        outcome: list[T] = []
        failure: list[BaseException] = []

        def target() -> None:
            try:
                _enter(namespace)
                outcome.append(work())
            except BaseException as exc:
                failure.append(exc)

        thread = threading.Thread(target=target, name=f"netns-{namespace}")
        thread.start()
        thread.join()
        if failure:
            raise failure[0]
        return outcome[0]


def _enter(namespace: str) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    fd = os.open(f"/run/netns/{namespace}", os.O_RDONLY | os.O_CLOEXEC)
    try:
        if libc.setns(fd, _CLONE_NEWNET) != 0:
            errno = ctypes.get_errno()
            raise OSError(errno, f"setns into {namespace}: {os.strerror(errno)}")
    finally:
        os.close(fd)
