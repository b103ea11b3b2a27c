"""Run the service under uvicorn with the lifecycle of issue 11: SIGTERM drains, SIGHUP reloads.

SIGTERM (or SIGINT): readiness turns false and new calls get ``503`` + ``Retry-After`` at once; calls in
flight get ``grace_secs`` to finish, the rest are cut with the same 503; then uvicorn closes its
listeners and connections, the pool stops its workers, and the process exits 0. SIGHUP re-reads the
config file (tenants, tokens, provider tables) without touching a call in flight.

Connections are bounded by ``connections.py`` (timeouts, caps, a descriptor reserve), with two settings
here: asyncio accepts at most ``backlog`` connections per wake-up before any of them reaches the
protocol (which counts them, and refuses those over a cap), so the listeners take :data:`ACCEPT_BURST`
at a time and their kernel queue is raised back to :data:`LISTEN_BACKLOG` afterwards; and uvicorn's own
loggers are not given their own handler, so its records pass through the service's safe formatters.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import signal
import socket
from collections.abc import Generator
from pathlib import Path
from typing import Any, Final

import uvicorn

from coordinator.service.app import create_app
from coordinator.service.config import ServeConfig, load_service_config
from coordinator.service.connections import (
    ACCEPT_BURST,
    AcceptErrorLog,
    ConnectionTable,
)
from coordinator.service.gate import Gate
from coordinator.service.logs import Throttle
from coordinator.service.protocol import bounded_httptools
from coordinator.service.state import Service

__all__ = ["run", "serve"]

log = logging.getLogger("rhaipool.service")

LISTEN_BACKLOG: Final = 2048
"""The kernel's queue of connections not yet accepted (uvicorn's default)."""
PER_REQUEST_WARNINGS: Final = (
    "Invalid HTTP request received.",
    "Unsupported upgrade request.",
    "No supported WebSocket library detected. Please use \"pip install 'uvicorn[standard]'\", or install "
    "'websockets' or 'wsproto' manually.",
)
"""What uvicorn warns of for any client's bad request: let through once per 10 s (logs.Throttle)."""


class _Server(uvicorn.Server):
    """uvicorn with our signal handling instead of its immediate shutdown."""

    def __init__(self, config: uvicorn.Config, gate: Gate, service: Service, table: ConnectionTable) -> None:
        super().__init__(config)
        self.gate, self.service, self.table = gate, service, table
        self._draining: asyncio.Task[None] | None = None

    @contextlib.contextmanager
    def capture_signals(self) -> Generator[None, None, None]:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._on_term)
        loop.add_signal_handler(signal.SIGHUP, self._on_hup)
        try:
            yield
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)

    def _on_term(self) -> None:
        if self._draining is None:
            self._draining = asyncio.ensure_future(self._drain())
        else:  # a second signal: stop now
            self.should_exit = True

    async def _drain(self) -> None:
        cut = await self.gate.drain(self.service.config.grace_secs)
        if cut:
            log.warning("grace period over: %d call(s) answered 503", cut)
        self.should_exit = True

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        loop = asyncio.get_running_loop()
        AcceptErrorLog(self.table).install(loop)
        with _handshake_timeout(loop, self.table.limits.header_timeout_secs if self.config.ssl else None):
            await super().startup(sockets)
        for server in getattr(self, "servers", []):
            for listener in server.sockets:
                _enlarge_backlog(listener)
        _tune_gc()

    def _on_hup(self) -> None:
        try:
            self.service.reload()
            log.warning("configuration reloaded")
        except ValueError as exc:
            log.warning("config reload failed, keeping the last good configuration: %s", exc)


def _tune_gc() -> None:
    """Once started, collect less often and never again scan what start-up built.

    Every call leaves young container objects (task, scope, request, futures), so with the default
    thresholds (700, 10, 10) the collector ran ~40 times per 1 000 calls, and every ~3 500 calls a
    full collection walked all ~55 000 objects of the imports, the pool and the app: 21 ms each, 11 us
    of CPU per call in all (measured: 24 000 calls of ``rhaipool bench service``'s two operations).
    ``gc.freeze()`` moves what exists at start-up out of the collector's sight (a full collection then
    took 1.5 ms); a first generation of 10 000 makes young collections 25x rarer (~2 ms each). Both:
    3 us per call, the longest pause ~2 ms.
    """
    gc.freeze()
    gc.set_threshold(10_000, 20, 10)


@contextlib.contextmanager
def _handshake_timeout(loop: asyncio.AbstractEventLoop, secs: float | None) -> Generator[None, None, None]:
    """uvicorn's ``create_server`` calls with a TLS handshake bound (asyncio's default is 60 s: a silent
    TLS client would hold its descriptor that long, before the protocol can count it)."""
    if secs is None:
        yield
        return
    create = loop.create_server
    loop.create_server = functools.partial(create, ssl_handshake_timeout=secs)  # type: ignore[method-assign]
    try:
        yield
    finally:
        del loop.create_server  # the class's method again


def _enlarge_backlog(listener: Any) -> None:
    """Give a listener created with a backlog of :data:`ACCEPT_BURST` the kernel queue it should have."""
    with socket.fromfd(listener.fileno(), listener.family, listener.type) as same:
        same.listen(LISTEN_BACKLOG)


def _uvicorn_config(app: Any, config: ServeConfig, table: ConnectionTable) -> uvicorn.Config:
    return uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        lifespan="on",
        http=bounded_httptools(config.max_header_bytes, table),  # C parser: see protocol.py
        backlog=ACCEPT_BURST,  # raised to LISTEN_BACKLOG once listening (see the module docstring)
        log_config=None,  # uvicorn's records go through the service's formatters (logs.py)
        ws="none",  # no WebSocket route: an upgrade must not swap the protocol under the connection table
        loop="asyncio",  # the loop is the caller's (asyncio.run); uvloop measured no better
        access_log=False,
        proxy_headers=False,  # the X-Forwarded-* rewrite cost every call; the address caps count peers
        log_level="warning",
        ssl_certfile=str(config.tls_cert) if config.tls_cert else None,
        ssl_keyfile=str(config.tls_key) if config.tls_key else None,
        timeout_graceful_shutdown=1,
        timeout_keep_alive=int(table.limits.idle_timeout_secs) or 1,  # the protocol sets it exactly
    )


def _throttle_uvicorn() -> None:
    uvicorn_log = logging.getLogger("uvicorn.error")
    if not any(isinstance(f, Throttle) for f in uvicorn_log.filters):
        uvicorn_log.addFilter(Throttle(PER_REQUEST_WARNINGS))


async def serve(config: ServeConfig, *, pool_options: dict[str, Any] | None = None) -> None:
    """Serve until SIGTERM/SIGINT has drained the calls."""
    _throttle_uvicorn()
    service = Service(config, pool_options=pool_options)
    # The pool exists once the lifespan has started, before the listeners take a first connection.
    table = ConnectionTable(config.connections, lambda: service.pool.workers_starting())
    gate = create_app(service)
    server = _Server(_uvicorn_config(gate, config, table), gate, service, table)
    await server.serve()
    if not server.started:
        raise SystemExit(1)


def run(config_path: Path) -> None:
    """``rhaipool serve --config FILE``."""
    asyncio.run(serve(load_service_config(config_path)))
