"""A throw-away PostgreSQL server: ``initdb`` in a temporary directory, started with ``pg_ctl`` on
127.0.0.1 as an unprivileged user (``postgres`` from the Debian package, else ``nobody``; this process's
own user when it is not root).

The one starter for ``rhaipool bench coordinators`` and the test suite's ``postgres`` fixture
(``tests/support/postgres_server.py``). The binaries come from Debian's ``postgresql`` package
(``/usr/lib/postgresql/<version>/bin``), which ``deploy/quickstart`` installs.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from coordinator.bench.measure import free_port

__all__ = ["PostgresServer", "postgres_bin", "throwaway_postgres"]


def postgres_bin() -> Path | None:
    """The newest installed server's ``bin`` directory, or None."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/initdb"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    return found[-1].parent if found else None


@dataclass
class PostgresServer:
    """One running server: its data directory, port and the URL of its ``postgres`` database."""

    bin: Path
    folder: Path
    port: int
    user: str | None  # the system user it runs as (None: this process's)
    url: str

    @classmethod
    def start(cls, bin_dir: Path) -> PostgresServer:
        folder = Path(tempfile.mkdtemp(prefix="rhaipool-pg-"))
        user: str | None = None
        if os.getuid() == 0:
            user = "postgres" if _user_exists("postgres") else "nobody"
            entry = pwd.getpwnam(user)
            os.chown(folder, entry.pw_uid, entry.pw_gid)
        data, port = folder / "data", free_port()
        server = cls(bin_dir, folder, port, user, f"postgresql://rhaipool@127.0.0.1:{port}/postgres")
        server._run("initdb", "-D", str(data), "-U", "rhaipool", "--auth=trust", "-E", "UTF8", "--no-sync")
        options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1 -c max_connections=200"
        server._run(
            "pg_ctl", "-D", str(data), "-o", options, "-l", str(folder / "log"), "-w", "-t", "60", "start"
        )
        return server

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin / tool), *args]
        if self.user is not None:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, cwd=self.folder, timeout=120)
        if done.returncode != 0:
            raise RuntimeError(
                f"{tool} failed ({done.returncode}): {done.stderr.strip() or done.stdout.strip()}"
            )

    def fresh(self) -> str:
        """The URL of a new, empty database on this server."""
        return fresh_database(self.url)

    def stop(self) -> None:
        with contextlib.suppress(RuntimeError, subprocess.TimeoutExpired):
            self._run("pg_ctl", "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)


def fresh_database(url: str) -> str:
    """The URL of a new, empty database on the server ``url`` points to."""
    import psycopg  # only where a PostgreSQL server is used

    name = f"t_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return url.rsplit("/", 1)[0] + f"/{name}"


@contextlib.contextmanager
def throwaway_postgres() -> Iterator[PostgresServer]:
    """A server for the ``with`` block (RuntimeError when PostgreSQL is not installed)."""
    bin_dir = postgres_bin()
    if bin_dir is None:
        raise RuntimeError(
            "PostgreSQL is not installed (deploy/quickstart installs the Debian package postgresql)"
        )
    server = PostgresServer.start(bin_dir)
    try:
        yield server
    finally:
        server.stop()


def _user_exists(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
