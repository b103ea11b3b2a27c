"""Fixtures for the provider tests: a real loopback HTTP server and policies that may reach it."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from coordinator.bench.standin import StandinServer
from coordinator.egress import EgressPolicy

from .harness import Harness, SharedPool
from .server import install_behaviours


@pytest.fixture(scope="session")
def server() -> Iterator[StandinServer]:
    """The stand-in OpenAI-compatible API plus the test behaviours, on 127.0.0.1."""
    with install_behaviours(StandinServer()) as srv:
        yield srv


@pytest.fixture
def policy() -> EgressPolicy:
    """A policy that may reach 127.0.0.1 (and only that)."""
    return EgressPolicy.build("local", egress_allow=("127.0.0.1",), max_response_bytes=1 << 20)


@pytest.fixture(scope="module")
def shared_pool() -> Iterator[SharedPool]:
    """One pool lent to the module's tests in turn (``harness.SharedPool`` says when it is renewed)."""
    shared = SharedPool()
    try:
        yield shared
    finally:
        shared.close()


@pytest.fixture
def harness(server: StandinServer, tmp_path: Path, shared_pool: SharedPool) -> Harness:
    """A providers directory plus a pool-backed runtime per test."""
    return Harness(server, tmp_path / "providers", shared_pool)
