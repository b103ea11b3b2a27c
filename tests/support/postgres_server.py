"""The ``postgres`` fixture: a real PostgreSQL server for the whole session, started by the one starter
``coordinator.bench.postgres`` (``initdb`` in a temporary directory, ``pg_ctl`` on 127.0.0.1, as an
unprivileged user). Without the Debian package the tests that need a server are skipped, saying so;
``deploy/quickstart`` installs it. Each test gets a database of its own (:meth:`PostgresServer.fresh`).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coordinator.bench.postgres import PostgresServer, postgres_bin

__all__ = ["PostgresServer", "postgres", "postgres_bin"]


@pytest.fixture(scope="session")
def postgres() -> Iterator[PostgresServer]:
    """A PostgreSQL server for the whole session (skipped when the Debian package is absent)."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (deploy/quickstart installs the Debian package postgresql)")
    server = PostgresServer.start(bin_dir)
    try:
        yield server
    finally:
        server.stop()
