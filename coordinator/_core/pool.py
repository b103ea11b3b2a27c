"""``Pool``: the asyncio API over supervisor, dispatcher and transport.

    caller ──load/call/stream──▶ Pool ──CallRecord──▶ Dispatcher ──CALL──▶ Router ══ipc══▶ workers
       ▲                                          │ ▲                  │
       └──── value / CallStream / typed error ◀───┘ │   Pool._inbox ◀──┘ every message, once
                                                    │     ├─ READY, HEARTBEAT, GOODBYE ─▶ Supervisor
                     Events: worker_ready/exited ───┘     └─ RESULT, ERROR, CHUNK, HOST_CALL,
                     (idle? busy?)        ▲                  CREDIT, anything malformed ─▶ Dispatcher
                                          │
                                  Supervisor (spawn, pidfd exit, watchdog, recycle)
                     one ticker task (50 ms): supervisor (liveness, memory, recycling),
                                              dispatcher (queue wait, re-runs out of time)

Ownership: the supervisor owns each worker's process record, the dispatcher its placement record
(``coordinator._core.workers``).  The supervisor is built first and handed to the dispatcher, which
attaches itself as its ``Events``; ``statistics()`` reads each one's frozen snapshot.  The pool
owns one TaskGroup: the ticker, every host-call task and a fleet's tasks live in it, and ``aclose``
ends them all.  Nothing here polls: waits are on ``Changes`` the owners notify.  The ROUTER is
bound in a fresh 0700 directory.

Past 400 lines: it is the public API (every documented method with its docstring), each a thin
call into the dispatcher, supervisor or quota table.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import shutil
import tempfile
import time
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

from coordinator._core import outcomes
from coordinator._core.calls import (
    CallEnded,
    CallRecord,
    CallResult,
    CallStream,
    HostHandler,
    Observers,
    Resident,
)
from coordinator._core.config import PoolConfig, TenantQuotas
from coordinator._core.dispatcher import Dispatcher
from coordinator._core.errors import Cancelled, MissingFunction, NoWorkerAvailable, PoolClosed
from coordinator._core.fleet import Fleet
from coordinator._core.handles import ScriptHandle, sha256_of
from coordinator._core.kills import KillReason
from coordinator._core.quotas import QuotaTable, ScriptBook
from coordinator._core.supervisor import Supervisor
from coordinator._core.transport import Router
from coordinator._core.workers import WorkerProcess, WorkerState
from coordinator.tenancy import DEFAULT_TENANT
from proto import Goodbye, Heartbeat, Kind, Op, Ready, Shutdown

__all__ = ["Pool", "PoolStatistics", "TenantUsage", "WorkerInfo"]

log = logging.getLogger(__name__)

_TICK = 0.05
_MEMORY_EVERY = 10  # ticks


@dataclass(frozen=True, slots=True)
class WorkerInfo:
    """A snapshot of one worker process, as the coordinator sees it."""

    id: str
    pid: int
    state: str
    calls: int
    inflight: int
    rss: int
    sandbox: dict[str, Any]
    probe: dict[str, Any] | None
    running: tuple[str, ...] = ()
    """``script:function`` of each call this worker holds."""
    dedicated_to: str | None = None
    """The tenant this worker runs alone (``PoolConfig.dedicated_workers``), ``None`` if shared."""


@dataclass(frozen=True, slots=True)
class PoolStatistics:
    """Counters for tests, ``rhaipool status`` and metrics; immutable snapshot."""

    workers: dict[str, int]
    queued: int
    inflight: int
    calls_ok: int
    calls_failed: int
    retries: int
    dropped_messages: int
    protocol_errors: int
    spawned: int
    exits: int
    exit_reasons: dict[str, int] = field(default_factory=dict)
    quarantined: int = 0
    stream_bytes: int = 0
    """Stream chunk bytes buffered for consumers now, all streams (``PoolConfig.stream_buffer_bytes``)."""
    stream_bytes_peak: int = 0
    """The most ``stream_bytes`` has been since the pool started."""
    queued_by_tenant: dict[str, int] = field(default_factory=dict)
    """``queued`` per tenant (tenants with nothing queued are left out)."""
    inflight_by_tenant: dict[str, int] = field(default_factory=dict)
    """Calls held by workers now, per tenant (tenants with none are left out)."""


@dataclass(frozen=True, slots=True)
class TenantUsage:
    """One tenant's use of its quotas now, beside the quotas themselves (``Pool.tenant_usage``)."""

    tenant: str
    quotas: TenantQuotas
    """The quotas that apply to the tenant now (its own, or the default)."""
    calls: int
    """Unfinished calls, queued or at workers (``max_calls``)."""
    queued: int
    """Calls waiting for a worker (``max_queued``)."""
    inflight: int
    """Calls placed at workers (``max_inflight``)."""
    cpu_seconds: float | None
    """CPU-seconds charged in the last minute (``cpu_seconds_per_minute``); ``None`` without that
    quota: nothing is measured then."""
    loaded_scripts: int
    """Scripts held loaded (``max_loaded_scripts``)."""
    loaded_script_bytes: int
    """Their source bytes (``max_loaded_script_bytes``)."""


class Pool:
    """Sandboxed Rhai workers behind one asyncio API.  Use as ``async with Pool(...) as pool``."""

    def __init__(
        self, config: PoolConfig | None = None, *, nodes: Fleet | None = None, **options: Any
    ) -> None:
        """``nodes``: other machines running workers too (``coordinator.nodes.NodeListener``)."""
        self.config = config if config is not None else PoolConfig(**options)
        self._nodes = nodes
        self._ids = itertools.count(1)
        self._quotas = QuotaTable(self.config.tenant_quotas)
        self._scripts = ScriptBook(self._quotas, cache_bytes=self.config.script_cache_bytes)
        self._tasks: asyncio.TaskGroup | None = None
        self._running: set[asyncio.Task[None]] = set()
        self._observers = Observers()
        self._closed = False
        self.endpoint = ""

    async def __aenter__(self) -> Pool:
        self._workdir = tempfile.mkdtemp(prefix="rhaipool-")  # mode 0700
        self.endpoint = f"ipc://{self._workdir}/pool.sock"
        self._router = Router(self.endpoint, self._inbox)
        self._tasks = asyncio.TaskGroup()
        await self._tasks.__aenter__()
        self._supervisor = Supervisor(self.config, self.endpoint, self._workdir, self._send_shutdown)
        self._dispatcher = Dispatcher(
            self.config, self._router, self._supervisor, self._spawn, self._quotas, self._observers
        )
        self._router.start(asyncio.get_running_loop())
        self._ticker = self._tasks.create_task(self._tick_forever())
        self._supervisor.rebalance()
        try:
            if self._nodes is not None:
                await self._nodes.start(self._router, self._supervisor, self.config, self._spawn)
            await self.wait_ready(self.config.deadlines.spawn)
        except BaseException:
            await self.__aexit__(None, None, None)
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> asyncio.Task[None]:
        """A task in the pool's TaskGroup (host calls, a handler's requests, a fleet's ticker)."""
        assert self._tasks is not None
        task = self._tasks.create_task(coro)
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return task

    def _inbox(self, identity: bytes, message: Any) -> None:
        """Every message from a worker arrives here once and goes to its owner (module docstring)."""
        process = self._supervisor.heard(identity)
        if process is None or process.kill_reason is KillReason.PROTOCOL:  # unknown, or a liar
            self._dispatcher.drop_foreign(identity, message, known=process is not None)
        elif isinstance(message, (Ready, Heartbeat, Goodbye)):
            self._supervisor.on_message(process, message)
        else:
            self._dispatcher.on_message(process, message)

    def _send_shutdown(self, worker: WorkerProcess) -> bool:
        return self._router.send(worker.identity, Shutdown("recycle" if not self._closed else "pool closed"))

    async def _tick_forever(self) -> None:
        for n in itertools.count():
            await asyncio.sleep(_TICK)
            try:
                now = time.monotonic()
                self._supervisor.tick(now)
                if n % _MEMORY_EVERY == 0:
                    self._supervisor.watch_memory()
                self._dispatcher.tick(now)
            except Exception:  # never let a bookkeeping bug kill the pool's heartbeat
                log.exception("pool tick failed")

    def _ready_count(self) -> int:
        return sum(w.state is WorkerState.ACTIVE for w in self._supervisor.workers.values())

    async def wait_ready(self, timeout: float | None = None) -> None:
        """Wait until ``workers`` processes are ACTIVE; ``NoWorkerAvailable`` if they cannot start."""
        wanted = self.config.worker_count
        async with asyncio.timeout(timeout):
            await self._supervisor.changes.wait_until(
                lambda: self._ready_count() >= wanted or self._supervisor.spawn_failing
            )
        if self._ready_count() < wanted:
            raise NoWorkerAvailable("workers exit before READY; see the coordinator log")

    # -- the API -------------------------------------------------------------
    async def load(
        self,
        source: str,
        *,
        name: str = "<script>",
        kind: Literal["region", "provider"] = "region",
        require: Sequence[tuple[str, int]] = (),
        timeout: float | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> ScriptHandle:
        """Compile ``source`` in a worker and return its handle;
        ``CompileError``/``MissingFunction`` on failure.

        The compile runs as ``tenant``'s call: it is scheduled, capped and struck like the tenant's others.
        The script counts against the tenant's loaded-script quotas (``ScriptQuotaExceeded``).
        """
        sha, size = sha256_of(source), len(source.encode("utf-8", "surrogatepass"))
        busy = self._dispatcher.scripts_running().get(tenant, set())
        self._scripts.make_room(tenant, (kind, sha), size, busy)
        handle = self._scripts.lookup((kind, sha), name)
        if handle is None:
            probe = ScriptHandle(sha, name, Kind(kind), (), source)
            result = await self._run(probe, Op.LOAD, "", [], timeout, tenant, None)
            functions = outcomes.described_functions(result.value)  # the dispatcher refused anything else
            assert functions is not None
            handle = ScriptHandle(sha, name, Kind(kind), functions, source)
        self._scripts.admit(tenant, handle, size)
        missing = [(fn, arity) for fn, arity in require if not handle.has_function(fn, arity)]
        if missing:
            raise MissingFunction(missing, name=name, sha=sha)
        return handle

    async def call(
        self,
        handle: ScriptHandle,
        function: str,
        *args: Any,
        timeout: float | None = None,
        tenant: str = DEFAULT_TENANT,
        host: HostHandler | None = None,
        resident: Resident | None = None,
    ) -> Any:
        """Run ``function(*args)`` of a loaded script; its value, or a ``CallFailed``/``PoolError``.

        ``resident`` (region calls) keeps ``args[0]["entries"]`` in the worker between calls.
        """
        call = self._start(handle, Op.CALL, function, list(args), timeout, tenant, host, resident)
        try:  # ``_run``'s body inlined: no second coroutine to create and step through per call
            return (await call.future).value
        finally:
            if not call.future.done():
                call.future.cancel()

    async def call_detailed(
        self,
        handle: ScriptHandle,
        function: str,
        *args: Any,
        timeout: float | None = None,
        tenant: str = DEFAULT_TENANT,
        host: HostHandler | None = None,
        resident: Resident | None = None,
    ) -> CallResult:
        """Like ``call``, with wall/CPU time, peak memory, operations and captured output."""
        return await self._run(handle, Op.CALL, function, list(args), timeout, tenant, host, resident)

    def stream(
        self,
        handle: ScriptHandle,
        function: str,
        *args: Any,
        timeout: float | None = None,
        tenant: str = DEFAULT_TENANT,
        host: HostHandler | None = None,
    ) -> CallStream:
        """Start ``function(*args, on_chunk)``;
        iterate the returned stream for chunks, then read ``.value``."""
        stream = CallStream(None if self._tasks is None else self._dispatcher.streams)  # None: refused below
        call = self._new_call(handle, Op.STREAM, function, list(args), timeout, tenant, host, stream)
        stream.credit = lambda n: call.top_up()
        stream.cancel = call.future.cancel
        call.future.add_done_callback(lambda f: f.exception() if not f.cancelled() else None)
        self._dispatcher.submit(call)
        return stream

    def _new_call(
        self, handle: ScriptHandle, op: Op, fn: str, args: list[Any], timeout: float | None, tenant: str,
        host: HostHandler | None, stream: CallStream | None = None,
    ) -> CallRecord:  # fmt: skip
        if self._closed or self._tasks is None:
            raise PoolClosed(
                "the pool is closed" if self._closed else "the pool is not started (use async with)"
            )
        future: asyncio.Future[CallResult] = asyncio.get_running_loop().create_future()
        budget = self.config.deadlines.call if timeout is None else float(timeout)
        return CallRecord(next(self._ids), handle, op, fn, args, budget, tenant, future, host, stream)

    async def _run(
        self, handle: ScriptHandle, op: Op, fn: str, args: list[Any], timeout: float | None, tenant: str,
        host: HostHandler | None, resident: Resident | None = None,
    ) -> CallResult:  # fmt: skip
        call = self._start(handle, op, fn, args, timeout, tenant, host, resident)
        try:
            return await call.future
        finally:
            if not call.future.done():
                call.future.cancel()

    def _start(
        self, handle: ScriptHandle, op: Op, fn: str, args: list[Any], timeout: float | None, tenant: str,
        host: HostHandler | None, resident: Resident | None,
    ) -> CallRecord:  # fmt: skip
        """Build and submit the call ``_run`` (and ``call``) then wait for: the caller's future is its end."""
        if resident is not None and (handle.kind != "region" or not args or type(args[0]) is not dict):
            raise ValueError("resident= needs a region script and a map as first argument")
        call = self._new_call(handle, op, fn, args, timeout, tenant, host)
        call.resident = resident
        self._dispatcher.submit(call)
        return call

    # -- quotas ----------------------------------------------------------------
    def set_tenant_quotas(self, default: TenantQuotas, per_tenant: Mapping[str, TenantQuotas]) -> None:
        """From now on ``per_tenant[t]`` applies to tenant ``t`` and ``default`` to every other tenant.

        Replaces the whole table (a tenant left out of ``per_tenant`` gets ``default`` again).  It
        applies to the next admission, placement and load: calls already running are not cut, a
        lowered cap refuses new calls with its usual typed error, and a raised ``max_inflight``
        places the calls it held back at once.  ``TypeError`` (and nothing changed) for anything but
        ``TenantQuotas``.  A lowered script cap forgets the scripts over it at once (those with no call
        running; a forgotten script's handle still works).  Call it on the pool's event loop.
        """
        self._quotas.replace(default, per_tenant)
        self._scripts.trim(self._dispatcher.scripts_running() if self._tasks is not None else {})
        if self._tasks is not None and not self._closed:
            self._dispatcher.pump()

    def set_dedicated(self, workers: Mapping[str, int], node_groups: Mapping[str, str]) -> None:
        """From now on ``workers[t]`` workers run tenant ``t`` alone, taken from node group
        ``node_groups[t]`` if it names one (as ``PoolConfig.dedicated_workers``/``dedicated_node_groups``).

        Replaces the whole set (a tenant left out is shared again, at once).  No worker is started or
        stopped and no call is failed: an idle worker moves at once; one holding calls is drained
        first (nothing new placed there) and moves when its calls end, so a newly dedicated tenant's
        calls may wait that long in the queue.  ``ValueError`` (nothing changed) for counts below 1,
        groups naming a tenant without workers, or local groups leaving no shared worker.  Call it on
        the pool's event loop.
        """
        if self._closed or self._tasks is None:
            raise PoolClosed("the pool is closed" if self._closed else "the pool is not started")
        self._dispatcher.placements.set_dedicated(workers, node_groups)
        self._dispatcher.pump()

    def dedicated(self) -> tuple[dict[str, int], dict[str, str]]:
        """The dedicated groups asked for now: tenant → workers, tenant → node group."""
        if self._tasks is None:
            return dict(self.config.dedicated_workers), dict(self.config.dedicated_node_groups)
        return self._dispatcher.placements.owners.wanted()

    def tenant_quotas(self, tenant: str) -> TenantQuotas:
        """The quotas that apply to ``tenant`` now."""
        return self._quotas.of(tenant)

    def tenant_usage(self, tenant: str) -> TenantUsage:
        """``tenant``'s calls, CPU and loaded scripts now, beside its quotas (for a tenant's own status)."""
        quotas, scripts, script_bytes = self._quotas.of(tenant), *self._scripts.held(tenant)
        calls = queued = inflight = 0
        cpu = 0.0 if quotas.cpu_seconds_per_minute is not None else None
        if self._tasks is not None:
            d = self._dispatcher
            calls, inflight = d.admission.outstanding(tenant), d.placements.per_tenant.get(tenant, 0)
            queued = max(0, calls - inflight)  # as ``max_queued`` counts them
            if cpu is not None:
                cpu = d.admission.cpu.used(tenant, time.monotonic())
        return TenantUsage(tenant, quotas, calls, queued, inflight, cpu, scripts, script_bytes)

    # -- introspection and shutdown -----------------------------------------
    def observe(self, observer: Callable[[CallEnded], None]) -> None:
        """Call ``observer`` as each call ends (refused ones too): its queue wait, result or error.

        For a host's metrics and logs; it runs on the pool's loop inside the call path, so it must be
        quick, and an exception it raises is logged and otherwise ignored.
        """
        self._observers.append(observer)

    def workers(self) -> list[WorkerInfo]:
        """Every live worker process (ACTIVE, SPARE, STARTING, DRAINING)."""
        infos = []
        for w in self._supervisor.workers.values():
            placement = self._dispatcher.placements.get(w)
            attempts = list(placement.attempts.values()) if placement is not None else []
            running = tuple(f"{a.call.handle.name}:{a.call.fn}" for a in attempts)
            state, held, owner = w.state.value, len(attempts), self._dispatcher.placements.owner(w)
            infos.append(
                WorkerInfo(w.id, w.pid, state, w.calls, held, w.rss, w.sandbox, w.probe, running, owner)
            )
        return infos

    def workers_starting(self) -> int:
        """Workers spawned here and not yet connected: each needs a descriptor soon (the service keeps
        one free for it: libzmq aborts the process when accepting a connection finds none)."""
        return self._supervisor.starting()

    def statistics(self) -> PoolStatistics:
        """The pool's counters now, as one immutable snapshot (the dispatcher's and the supervisor's)."""
        d, s = self._dispatcher.statistics(), self._supervisor.statistics()
        return PoolStatistics(
            s.workers, d.queued, d.inflight, d.ok, d.failed, d.retries, d.dropped, d.protocol_errors,
            s.spawned, s.exits, s.exit_reasons, d.quarantined,
            stream_bytes=d.stream_bytes, stream_bytes_peak=d.stream_bytes_peak,
            queued_by_tenant=d.queued_by_tenant, inflight_by_tenant=d.inflight_by_tenant,
        )  # fmt: skip

    async def aclose(self) -> None:
        """Stop accepting, let in-flight calls finish for ``shutdown_grace``,
        cancel the rest, stop workers."""
        if self._closed or self._tasks is None:
            return
        self._closed = True
        self._dispatcher.stop_accepting()
        await self._dispatcher.wait_settled(self.config.deadlines.shutdown_grace)
        self._dispatcher.close(lambda: Cancelled("the pool was closed before the call finished"))
        await self._supervisor.aclose()
        if self._nodes is not None:
            await self._nodes.aclose()
        self._ticker.cancel()
        for task in list(self._running):  # what is left belongs to calls that have all ended now
            task.cancel()
        tasks, self._tasks = self._tasks, None
        with contextlib.suppress(asyncio.CancelledError):
            await tasks.__aexit__(None, None, None)
        self._router.close()
        shutil.rmtree(self._workdir, ignore_errors=True)

    @property
    def closed(self) -> bool:
        return self._closed
