"""What one client's connections may hold: timeouts, caps, and a reserve of file descriptors.

A connection costs a descriptor, and the descriptors are the service's too: it needs some to replace a
worker, reach a node, call a model provider, or simply to accept the next health check. So:

- **timeouts**: a request head must arrive within ``header_timeout_secs`` of the connection (or of the
  head's first byte on a kept-alive one), its body within ``body_timeout_secs`` of the head, and a
  kept-alive connection may sit idle ``idle_timeout_secs``; a reply the client stops reading is cut after
  ``body_timeout_secs`` too. A late head or body is answered ``408`` and closed. Time the service itself
  paused reading (pipelined requests waiting their turn) does not count.
- **caps**: at most ``max_connections_per_address`` connections from one client address (an IPv6 client
  is its /64; it is the peer's address, so behind a reverse proxy the proxy's: raise the cap there),
  and at most ``max_connections`` in all (by default the descriptor limit less the reserve and less
  what the service held when it started). At the total cap, or when the descriptor the new connection
  got is within ``fd_reserve`` of the limit, a connection that holds no request (silent, still sending
  its head, or idle between requests) is closed to make room, the oldest of the address holding the
  most; if every connection holds a request, the new one is answered ``503`` with ``Retry-After`` and
  closed. A connection over its address's cap is refused the same way. Nothing is ever left queued.
  Over TLS a connection is counted once its handshake is done; the handshake itself must be done
  within ``header_timeout_secs``.
- **a starting worker's connection comes first**: libzmq aborts the whole process when its accept() of
  a worker's connection finds no descriptor left, so while a worker is starting (spawned, its
  connection not yet made) the reserve grows by one per starting worker and :data:`ACCEPT_BURST` (what
  asyncio may accept before the protocol counts it), whatever ``fd_reserve`` says.
- **accept errors** (the process out of descriptors all the same) are logged once per
  :data:`ACCEPT_ERROR_LOG_SECS`, with how many were seen, not once per attempt.

The timeouts are checked by one sweep over the open connections every :attr:`ConnectionTable.interval`
seconds, so a request costs two attribute writes, not a timer. The table is read at start; a SIGHUP
reload does not change it.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import os
import resource
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Protocol

from coordinator.service.errors import ServiceConfigError

__all__ = [
    "ACCEPT_BURST",
    "ACCEPT_ERROR_LOG_SECS",
    "AcceptErrorLog",
    "ConnectionLimits",
    "ConnectionTable",
    "ServiceConfigError",
    "parse_connection_limits",
]

log = logging.getLogger("rhaipool.service.connections")

ACCEPT_ERROR_LOG_SECS: Final = 10.0
ACCEPT_BURST: Final = 8
"""Connections accepted per wake-up of a listener: the most ever held before the protocol counts them."""
_ACCEPT_ERROR: Final = "socket.accept() out of system resource"  # asyncio's context message for EMFILE & co


@dataclass(frozen=True, slots=True)
class ConnectionLimits:
    """The ``[serve]`` keys that bound connections (see the module docstring)."""

    header_timeout_secs: float = 10.0
    body_timeout_secs: float = 30.0
    idle_timeout_secs: float = 30.0
    max_connections: int | None = None
    """``None``: the descriptor limit less :attr:`fd_reserve` less what the service holds at start."""
    max_connections_per_address: int = 256
    fd_reserve: int = 64


def _seconds(serve: Mapping[str, Any], key: str, default: float) -> float:
    value = serve.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 86_400:
        raise ServiceConfigError(f"[serve] {key} must be a number of seconds > 0 (at most 86400)")
    return float(value)


def _count(serve: Mapping[str, Any], key: str, default: int | None, least: int) -> int | None:
    value = serve.get(key, default)
    if value is None:
        return None
    if type(value) is not int or value < least:
        raise ServiceConfigError(f"[serve] {key} must be a whole number >= {least}")
    return value


def parse_connection_limits(serve: Mapping[str, Any]) -> ConnectionLimits:
    """The connection keys of the ``[serve]`` table; :class:`ServiceConfigError` naming a bad one."""
    default = ConnectionLimits()
    per_address = _count(serve, "max_connections_per_address", default.max_connections_per_address, 1)
    reserve = _count(serve, "fd_reserve", default.fd_reserve, 0)
    assert per_address is not None and reserve is not None
    return ConnectionLimits(
        header_timeout_secs=_seconds(serve, "header_timeout_secs", default.header_timeout_secs),
        body_timeout_secs=_seconds(serve, "body_timeout_secs", default.body_timeout_secs),
        idle_timeout_secs=_seconds(serve, "idle_timeout_secs", default.idle_timeout_secs),
        max_connections=_count(serve, "max_connections", None, 1),
        max_connections_per_address=per_address,
        fd_reserve=reserve,
    )


class Connection(Protocol):
    """What the table needs of a connection (``protocol.BoundedHttpTools``)."""

    @property
    def holds_request(self) -> bool:
        """A request of it is being received or answered: not to be closed to make room."""

    def expire(self, now: float, elapsed: float) -> None:
        """Cut it if one of its timeouts has passed; ``elapsed`` since the last sweep."""

    def evict(self) -> None:
        """Close it, to make room for another."""


def address_key(peer: Any) -> str:
    """Whose connection this is, for the per-address cap: the IP address (an IPv6 one's /64)."""
    if not isinstance(peer, tuple) or not peer:
        return ""  # a Unix socket: one local client
    host = str(peer[0])
    if ":" not in host:
        return host
    try:
        address = ipaddress.IPv6Address(host.partition("%")[0])
    except ValueError:
        return host
    if address.ipv4_mapped is not None:
        return str(address.ipv4_mapped)
    return str(ipaddress.IPv6Network((address, 64), strict=False))


def descriptor_limit() -> int:
    """This process's soft ``RLIMIT_NOFILE`` (a large number when unlimited)."""
    soft, _hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return 1 << 20 if soft == resource.RLIM_INFINITY or soft < 0 else int(soft)


def open_descriptors() -> int | None:
    """How many descriptors this process holds now (None when the system cannot say, or has none left
    to say it with)."""
    for folder in ("/proc/self/fd", "/dev/fd"):
        try:
            return max(len(os.listdir(folder)) - 1, 0)  # less the one listdir itself held
        except OSError:
            continue
    return None


class ConnectionTable:
    """The service's open connections, counted in all and per address, swept for their timeouts."""

    def __init__(self, limits: ConnectionLimits, workers_starting: Callable[[], int] = lambda: 0) -> None:
        self.limits = limits
        self.workers_starting = workers_starting
        """How many of the pool's workers are starting now (each will need a descriptor)."""
        self.fd_limit = descriptor_limit()
        self.max_connections: int | None = limits.max_connections  # derived at the first connection
        self.interval = min(max(min(limits.header_timeout_secs, limits.body_timeout_secs) / 10, 0.05), 1.0)
        self.refused = 0  # connections answered 503 at once
        self.evicted = 0  # connections closed to make room
        self._open: dict[Connection, str] = {}  # in the order they came: the first evictable is the oldest
        self._per_address: dict[str, int] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._last_sweep = 0.0

    def __len__(self) -> int:
        return len(self._open)

    def admit(self, conn: Connection, peer: Any, fd: int) -> str | None:
        """Count ``conn`` in, or the reason it is refused (then it is not counted)."""
        key = address_key(peer)
        if self._per_address.get(key, 0) >= self.limits.max_connections_per_address:
            self.refused += 1
            return "too many connections from this address"
        if self.max_connections is None:
            self.max_connections = self._derived_cap()
        full = len(self._open) >= self.max_connections
        reserve = self.limits.fd_reserve
        if starting := self.workers_starting():
            reserve += starting + ACCEPT_BURST
        if (full or fd >= self.fd_limit - reserve) and not self._make_room():
            self.refused += 1
            return "too many connections"
        self._open[conn] = key
        self._per_address[key] = self._per_address.get(key, 0) + 1
        self._arm()
        return None

    def forget(self, conn: Connection) -> None:
        """``conn`` has closed."""
        key = self._open.pop(conn, None)
        if key is None:
            return
        left = self._per_address[key] - 1
        if left:
            self._per_address[key] = left
        else:
            del self._per_address[key]

    def _derived_cap(self) -> int:
        held = open_descriptors() or 0
        cap = self.fd_limit - self.limits.fd_reserve - held
        if cap < 64:
            log.warning(
                "the descriptor limit (%d, %d held at start, %d kept in reserve) leaves room for %d "
                "connections: raise the service's RLIMIT_NOFILE (systemd: LimitNOFILE=)",
                self.fd_limit, held, self.limits.fd_reserve, max(cap, 1),
            )  # fmt: skip
        return max(cap, 1)

    def _make_room(self) -> bool:
        """Close a connection that holds no request, from the address that holds the most (the oldest
        of those): a flood from one client costs that client, not the quiet one beside it."""
        victim, most = None, 0
        for conn, key in self._open.items():
            if not conn.holds_request and (count := self._per_address[key]) > most:
                victim, most = conn, count
        if victim is None:
            return False
        self.forget(victim)  # now, not when its close completes: the room is taken at once
        victim.evict()
        self.evicted += 1
        return True

    def _arm(self) -> None:
        if self._timer is None:
            loop = asyncio.get_running_loop()
            self._last_sweep = loop.time()
            self._timer = loop.call_later(self.interval, self._sweep)

    def _sweep(self) -> None:
        self._timer = None
        now = asyncio.get_running_loop().time()
        elapsed, self._last_sweep = now - self._last_sweep, now
        for conn in list(self._open):
            conn.expire(now, elapsed)
        if self._open:
            self._arm()


class AcceptErrorLog:
    """A loop exception handler that logs accept() failures once per interval, with their count.

    asyncio reports each failed ``accept()`` (EMFILE: out of descriptors) with a traceback; Python 3.11
    retries at once for every connection waiting, so a full process wrote ~8 MB of log a second.
    Everything else goes to the handler that was there before (or asyncio's default).
    """

    def __init__(self, table: ConnectionTable, interval: float = ACCEPT_ERROR_LOG_SECS) -> None:
        self.table, self.interval = table, interval
        self.seen = 0
        self._logged_at = -interval
        self._unlogged = 0
        self._before: Any = None

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        """Become ``loop``'s exception handler."""
        self._before = loop.get_exception_handler()
        loop.set_exception_handler(self)

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != _ACCEPT_ERROR:
            if self._before is not None:
                self._before(loop, context)
            else:
                loop.default_exception_handler(context)
            return
        self.seen += 1
        self._unlogged += 1
        now = time.monotonic()
        if now - self._logged_at < self.interval:
            return
        log.error(
            "accept() failed %d time(s) since the last report: %s (descriptor limit %d, %s held, "
            "%d connections open); the next report in %.0f s at the earliest",
            self._unlogged, context.get("exception"), self.table.fd_limit, open_descriptors() or "all",
            len(self.table), self.interval,
        )  # fmt: skip
        self._logged_at, self._unlogged = now, 0
