"""One real ``rhaipool serve`` for the whole folder (starting one costs ~10 s on this machine), with
tenant B set up in it; each module measures B's baseline again before its first attack."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from hostile_service import HOSTILE_ENV, MIB, Arena, Bounds

SERVE = """
max_body_bytes = 2097152
header_timeout_secs = 1
body_timeout_secs = 2
idle_timeout_secs = 2
max_connections_per_address = 16
"""
"""Small connection bounds so the connection attacks finish in seconds (the defaults are 10, 30, 30, 256)."""
DEFAULTS = """
max_regions = 20
max_region_budget = 100000
max_entry_bytes = 4194304
max_scripts = 16
max_script_bytes = 1048576
max_streams = 4
max_connections = 16
max_idempotency_bytes = 4194304
provider_call_secs = 3
"""
"""Every tenant's quotas (B's and the corpus tenants'): small, so an attack reaches them quickly."""
ATTACKER = """
max_regions = 2000
"""
"""Tenant A's own: 2 000 regions, to show listing endpoints cost a tenant its own regions only."""
BOUNDS = Bounds(rss=96 * MIB, disk=24 * MIB, fds=48)
"""How far past its idle values the coordinator may grow while attacked. What the quotas above let the
tenants hold: A's 4 MiB of entries and 1 MiB of scripts (twice on disk: the database and its WAL),
the corpus tenants' scripts (under 2 MiB in all), 2 000 small regions, 16 connections from A's address;
the rest is slack for a process that serves. Unbounded, the attacks grew memory by ~200 MiB, the
database by ~150 MiB and held ~2 000 descriptors (issue 22)."""


@pytest.fixture(scope="package")
def service_arena(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Arena]:
    folder: Path = tmp_path_factory.mktemp("hostile-service")
    arena = Arena.open(
        folder, BOUNDS, serve=SERVE, defaults=DEFAULTS, attacker=ATTACKER,
        log_json=False, env=HOSTILE_ENV,
    )  # fmt: skip
    try:
        yield arena
    finally:
        arena.close()


@pytest.fixture(scope="module")
def arena(service_arena: Arena) -> Arena:
    """The folder's arena, with B's baseline measured again for this module."""
    service_arena.measure_baseline()
    return service_arena
