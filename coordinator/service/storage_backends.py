"""Where :class:`~coordinator.service.storage.Storage` keeps its rows: one SQLite file (the embedded
default, one coordinator) or a PostgreSQL database (several coordinators sharing tenants by lease).

Both engines run the same statements and the same migrations. Statements are written once, with ``?``
placeholders and SQL both accept (``ON CONFLICT`` upserts, ``RETURNING``); what differs lives here and
nowhere else:

================  ==========================================  ==========================================
                  SQLite                                      PostgreSQL (psycopg 3)
================  ==========================================  ==========================================
connection        one per process, ``WAL`` + ``synchronous``  one per process, autocommit, re-opened
                  ``=FULL``, file 0600                        after a lost connection; TCP keepalives
                                                              and ``tcp_user_timeout`` so a partition
                                                              fails a call instead of hanging it
transaction       ``BEGIN IMMEDIATE`` (one writer)            ``BEGIN`` (read committed) + row locks
schema version    ``PRAGMA user_version``                     table ``rhaipool_schema``, migrations
                                                              under an advisory lock (coordinators
                                                              starting together migrate once)
column types      as written                                  ``REAL`` → ``DOUBLE PRECISION`` (SQLite's
                                                              REAL is 8 bytes), ``BLOB`` → ``BYTEA``,
                                                              ``INTEGER`` → ``BIGINT``
clock             ``julianday('now')``                        ``clock_timestamp()`` (the server's: the
                                                              coordinators' clocks never meet)
lease fence lock  none needed (the writer holds the file)     ``FOR SHARE`` on the lease row
disk full         ``SQLITE_FULL`` → 507                       SQLSTATE 53100 (disk full), 53200 (out
                                                              of memory), 58030 (I/O error) → 507
================  ==========================================  ==========================================

Every call runs on a worker thread (``asyncio.to_thread`` in :class:`Storage`) through one lock, so one
connection serves the whole process and the event loop never waits on the database.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, NamedTuple, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

from coordinator.service.errors import ServiceConfigError, StorageFailed

if TYPE_CHECKING:  # imported when a PostgreSQL backend opens: SQLite's coordinator never loads it
    import psycopg

__all__ = [
    "Backend",
    "Db",
    "Dialects",
    "Migrations",
    "PostgresBackend",
    "SQLiteBackend",
    "is_database_url",
    "open_backend",
    "redacted_url",
]

T = TypeVar("T")


class Dialects(NamedTuple):
    """A migration statement that the two engines spell differently."""

    sqlite: str
    postgresql: str


Migrations = tuple[tuple[str | Dialects, ...], ...]
"""Each migration's statements, in order; a plain string is the same text on both engines."""


class Rows(Protocol):
    """What a statement returns: the rows it selected (or ``RETURNING``) and how many it changed."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...


class Db(Protocol):
    """The connection a storage function is given (inside a transaction when it asked for one)."""

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> Rows: ...

    def executemany(self, sql: str, params: Iterable[Sequence[Any]], /) -> object: ...


class Backend(Protocol):
    """One engine: runs functions on its connection, migrates, closes."""

    engine: str
    """``"sqlite"`` or ``"postgresql"``."""
    where: str
    """What a message names: the file, or the URL without its password."""
    now: str
    """An SQL expression of the database's clock, in seconds since the epoch."""
    share_lock: str
    """What a ``SELECT`` appends to lock the rows it read against a concurrent update until commit."""

    def run(self, fn: Callable[[Db], T], *, transaction: bool) -> T: ...

    def migrate(self, migrations: Migrations) -> int: ...

    def close(self) -> None: ...


_URL_SCHEMES: Final = ("postgresql://", "postgres://")


def is_database_url(value: str) -> bool:
    """Whether ``[serve] database`` names a PostgreSQL server rather than a file."""
    return value.startswith(_URL_SCHEMES)


def redacted_url(url: str) -> str:
    """``url`` with its password replaced by ``***`` (what logs and errors may show)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    return urlunsplit(parts._replace(netloc=f"{parts.username}:***@{netloc}"))


def open_backend(where: Path | str, *, idle_secs: float | None = None) -> Backend:
    """The backend for a file path or a ``postgresql://`` URL (``idle_secs``: :class:`PostgresBackend`)."""
    if isinstance(where, str) and is_database_url(where):
        return PostgresBackend(where, idle_secs=idle_secs)
    return SQLiteBackend(Path(where))


def _too_new(where: str, version: int, known: int) -> ServiceConfigError:
    return ServiceConfigError(
        f"database {where} is at schema version {version}, newer than this release's "
        f"{known}: run the release that wrote it, or restore a backup taken before"
    )


# -- SQLite --------------------------------------------------------------------------------------

_FULL: Final = frozenset({sqlite3.SQLITE_FULL}) if hasattr(sqlite3, "SQLITE_FULL") else frozenset({13})


def _sqlite_failure(exc: sqlite3.Error) -> StorageFailed:
    code = getattr(exc, "sqlite_errorcode", None)
    if code in _FULL or "full" in str(exc).lower():
        return StorageFailed(507, "storage is full: the change was not saved and nothing changed")
    return StorageFailed(503, f"storage unavailable ({exc}): the change was not saved and nothing changed")


def _private(path: Path) -> None:
    """Create ``path`` 0600 if missing, and make it (and SQLite's side files) 0600 if they exist."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)
    for suffix in ("", "-wal", "-shm", "-journal"):
        with contextlib.suppress(FileNotFoundError):
            os.chmod(f"{path}{suffix}", 0o600)


class SQLiteBackend:
    """One SQLite file; every commit durable (``WAL``, ``synchronous=FULL``); the files 0600."""

    engine = "sqlite"
    now = "((julianday('now') - 2440587.5) * 86400.0)"
    share_lock = ""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.where = str(path)
        _private(path)
        self._db = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        self._lock = threading.Lock()
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.execute("PRAGMA busy_timeout=5000")

    def migrate(self, migrations: Migrations) -> int:
        """Apply the migrations this file has not seen, each in its own transaction; the new version."""
        with self._lock:
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
            if version > len(migrations):
                raise _too_new(self.where, version, len(migrations))
            for number, statements in enumerate(migrations[version:], start=version + 1):
                self._db.execute("BEGIN IMMEDIATE")
                for statement in statements:
                    self._db.execute(statement.sqlite if isinstance(statement, Dialects) else statement)
                self._db.execute(f"PRAGMA user_version={number}")
                self._db.execute("COMMIT")
        _private(self.path)  # the WAL and shm files exist now
        return len(migrations)

    def close(self) -> None:
        """Close the connection (a checkpoint folds the WAL back into the file)."""
        with self._lock:
            self._db.close()

    def run(self, fn: Callable[[Db], T], *, transaction: bool) -> T:
        """``fn`` on the connection (in ``BEGIN IMMEDIATE`` … ``COMMIT`` when ``transaction``); any
        exception rolls the transaction back; an SQLite error becomes :class:`StorageFailed`."""
        with self._lock:
            try:
                if not transaction:
                    return fn(self._db)
                self._db.execute("BEGIN IMMEDIATE")
                result = fn(self._db)
                self._db.execute("COMMIT")
                return result
            except BaseException as exc:
                if self._db.in_transaction:
                    with contextlib.suppress(sqlite3.Error):
                        self._db.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise _sqlite_failure(exc) from None
                raise


# -- PostgreSQL ----------------------------------------------------------------------------------

_NO_ROOM: Final = {
    "53100": "storage is full",
    "53200": "the database server is out of memory",
    "58030": "the database server could not write (I/O error)",
}
"""SQLSTATEs of a server that cannot take a write (507, as SQLite's full disk): the class 53 ones a
retry soon does not cure (not 53300, too many connections: a 503), and an I/O error on its disk."""
_TYPES: Final = ((re.compile(r"\bREAL\b"), "DOUBLE PRECISION"), (re.compile(r"\bBLOB\b"), "BYTEA"))
_INTEGER: Final = re.compile(r"\bINTEGER\b")
_DDL: Final = re.compile(r"^\s*(CREATE|ALTER)\s+TABLE\b", re.IGNORECASE)
_SCHEMA_LOCK: Final = 0x72686169  # "rhai": the advisory lock that serialises migrations
_CONNECT: Final = {
    "connect_timeout": 5,  # seconds
    "keepalives": 1,
    "keepalives_idle": 5,
    "keepalives_interval": 2,
    "keepalives_count": 3,
    "tcp_user_timeout": 15_000,  # ms: unacknowledged data past this fails the call (a partition)
}


def postgresql_statement(statement: str | Dialects) -> str:
    """A migration statement as PostgreSQL runs it (the type mapping of the module's table)."""
    if isinstance(statement, Dialects):
        return statement.postgresql
    if not _DDL.match(statement):
        return statement
    for pattern, replacement in _TYPES:
        statement = pattern.sub(replacement, statement)
    return _INTEGER.sub("BIGINT", statement)


@functools.lru_cache(maxsize=512)
def _placeholders(sql: str) -> str:
    return sql.replace("%", "%%").replace("?", "%s")


class _PgDb:
    """A psycopg connection that takes the statements' ``?`` placeholders."""

    __slots__ = ("_conn",)

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self._conn = conn

    def execute(self, sql: str, params: Sequence[Any] = (), /) -> Rows:
        return self._conn.execute(_placeholders(sql), tuple(params))

    def executemany(self, sql: str, params: Iterable[Sequence[Any]], /) -> object:
        rows = [tuple(p) for p in params]
        if rows:
            with self._conn.cursor() as cursor:
                cursor.executemany(_placeholders(sql), rows)
        return None


def _pg_failure(exc: psycopg.Error) -> StorageFailed:
    no_room = _NO_ROOM.get(exc.sqlstate or "")
    if no_room is not None:
        return StorageFailed(507, f"{no_room}: the change was not saved and nothing changed")
    first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return StorageFailed(503, f"storage unavailable ({first}): the change was not saved and nothing changed")


class PostgresBackend:
    """A PostgreSQL database through one psycopg connection (autocommit; a transaction when asked).

    ``idle_secs``: the server ends this connection's transaction if it waits on the coordinator longer
    than that between statements (``idle_in_transaction_session_timeout``) -- a coordinator paused or
    frozen in the middle of a transaction would otherwise hold its row locks, the lease rows among
    them, and no other coordinator could take its tenants until it came back.
    """

    engine = "postgresql"
    now = "extract(epoch from clock_timestamp())::float8"
    share_lock = " FOR SHARE"

    def __init__(self, url: str, *, idle_secs: float | None = None) -> None:
        global psycopg  # the driver loads with the first PostgreSQL backend
        import psycopg

        self.url = url
        self._options: dict[str, int | str] = dict(_CONNECT)
        if idle_secs is not None:
            timeout = max(1, round(idle_secs * 1000))
            self._options["options"] = f"-c idle_in_transaction_session_timeout={timeout}"
        self.where = redacted_url(url)
        self._lock = threading.Lock()
        self._conn: psycopg.Connection[Any] | None = None
        try:
            self._connection()
        except psycopg.Error as exc:
            raise ServiceConfigError(f"[serve] database {self.where} cannot be reached: {exc}") from None

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            if self._conn is not None:
                with contextlib.suppress(psycopg.Error):
                    self._conn.close()
            self._conn = None
            self._conn = psycopg.connect(self.url, autocommit=True, **self._options)  # type: ignore[arg-type]
        return self._conn

    def migrate(self, migrations: Migrations) -> int:
        """Apply the migrations the database has not seen, each in its own transaction under an
        advisory lock, so coordinators that start together apply each once; the new version."""
        with self._lock:
            try:
                conn = self._connection()
                for number, statements in enumerate(migrations, start=1):
                    with conn.transaction():
                        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
                        conn.execute("CREATE TABLE IF NOT EXISTS rhaipool_schema (version BIGINT NOT NULL)")
                        found = conn.execute("SELECT version FROM rhaipool_schema").fetchone()
                        if found is None:
                            conn.execute("INSERT INTO rhaipool_schema VALUES (0)")
                        version = 0 if found is None else int(found[0])
                        if version > len(migrations):
                            raise _too_new(self.where, version, len(migrations))
                        if version >= number:
                            continue
                        for statement in statements:
                            conn.execute(postgresql_statement(statement).replace("%", "%%"))
                        conn.execute("UPDATE rhaipool_schema SET version = %s", (number,))
                return len(migrations)
            except psycopg.Error as exc:
                raise ServiceConfigError(f"database {self.where} cannot be migrated: {exc}") from None

    def close(self) -> None:
        """Close the connection."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()

    def run(self, fn: Callable[[Db], T], *, transaction: bool) -> T:
        """``fn`` on the connection (in a transaction when ``transaction``: any exception rolls it
        back); a database or connection error becomes :class:`StorageFailed`, and the next call opens
        a new connection if this one broke."""
        with self._lock:
            try:
                conn = self._connection()
                if not transaction:
                    return fn(_PgDb(conn))
                with conn.transaction():
                    return fn(_PgDb(conn))
            except psycopg.Error as exc:
                raise _pg_failure(exc) from None
