"""Network-namespace fixtures: one topology per session (coordinator + 2 node namespaces), always removed.

Leftovers of an earlier run that died are removed before the first test; the finalizer removes the
namespaces even when a test fails.  Without root or iproute2 every test here skips, saying which.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))

from stray_children import no_stray_children

from coordinator.bench.netns import Topology, netns_unavailable

__all__ = ["no_stray_children", "topology"]


@pytest.fixture(scope="session")
def topology() -> Iterator[Topology]:
    why = netns_unavailable()
    if why is not None:
        pytest.skip(why)
    topo = Topology(nodes=2, prefix="rpn")
    topo.destroy()  # leftovers of a run that died
    try:
        topo.create()
        yield topo
    finally:
        topo.destroy()


@pytest.fixture
def links_up(topology: Topology) -> Iterator[Topology]:
    """The topology with every link up before and after the test (a partition test cuts one)."""
    for index in range(1, topology.nodes + 1):
        topology.set_link(index, up=True)
    yield topology
    for index in range(1, topology.nodes + 1):
        topology.set_link(index, up=True)
