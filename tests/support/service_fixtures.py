"""One real service per test module (its workers outlive single tests by design): the service and
client suites' fixtures, re-exported by their conftests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from service_support import ServiceProcess, free_port, write_config

from coordinator.bench.standin import StandinServer

__all__ = ["no_stray_children", "service", "standin"]


@pytest.fixture(autouse=True)
def no_stray_children() -> Iterator[None]:
    """Overrides the pool suites' per-test check: ``ServiceProcess.stop`` checks the workers instead."""
    yield


@pytest.fixture(scope="module")
def standin() -> Iterator[StandinServer]:
    with StandinServer() as server:
        yield server


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory, standin: StandinServer) -> Iterator[ServiceProcess]:
    folder = tmp_path_factory.mktemp("service")
    port = free_port()
    running = ServiceProcess.start(write_config(folder, port=port, standin=standin.base_url), port)
    yield running
    assert running.stop() == 0
