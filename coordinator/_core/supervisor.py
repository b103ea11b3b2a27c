"""Spawn, watch, kill, recycle and reap worker processes; say why each one exited.

    spawn ──Popen(python -I -m worker)──▶ STARTING ──READY──▶ SPARE ──promote──▶ ACTIVE
                                              │                   Events.worker_ready│ recycle: a spare is
              pidfd readable (exit, < 1 ms) ◀─┴──────────────────────────────────┤ promoted first, then
                       │                                                         ▼ SHUTDOWN → GOODBYE
                       └──▶ reap (waitpid) → exit reason → Events.worker_exited ◀─ DRAINING

Owns the ``WorkerProcess`` records (``coordinator._core.workers``) and writes nothing else:
processes, pidfds, stderr tails, liveness, the memory watchdog, recycling decisions and pool
sizing (``workers`` active + ``spares`` warm).  READY, HEARTBEAT and GOODBYE come to it from the
pool's inbox.  Does not own calls: the ``Events`` attached to it (the dispatcher) hear of
every promotion and every exit and settle the calls, and answer the two questions it has about
them (is a worker idle, is its loop thread busy with a call).  Kill policy: SHUTDOWN,
``shutdown_grace`` seconds, then SIGKILL (workers have no children of their own).

Every worker's process is a ``coordinator._core.processes.Process`` (kill, alive, memory, stopped):
a local one is spawned here (``worker_command``, ``LocalProcess``) and reaped through its pidfd.
Remote workers (run by a node on another machine, ``coordinator.nodes``) are ``adopt``ed instead: the
node reports their exit (``exited``) and memory, and a kill is a message to it.  They are promoted as
soon as READY, are not counted in ``workers`` or ``spares`` (``Process.local``: their node keeps its
own number running) and are not recycled here.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final, Protocol

from coordinator._core.config import PoolConfig
from coordinator._core.kills import KillReason
from coordinator._core.processes import LocalProcess, Process, worker_args, worker_command
from coordinator._core.waiting import Changes
from coordinator._core.workers import WorkerProcess, WorkerState, describe_exit
from proto import SUPPORTED_VERSIONS, Goodbye, Heartbeat, Ready

__all__ = ["Events", "Supervisor", "SupervisorStatistics"]

log = logging.getLogger(__name__)

_STDERR_TAIL: Final = 4096


@dataclass(frozen=True, slots=True)
class SupervisorStatistics:
    """The supervisor's counters at one moment (``Supervisor.statistics``)."""

    workers: dict[str, int]
    """Processes by state (``WorkerState`` values; states with none left out)."""
    spawned: int
    exits: int
    exit_reasons: dict[str, int]
    """Exits by kill reason, ``goodbye`` or ``crash``."""
    spawn_failures: int


class Events(Protocol):
    """What the supervisor tells, and asks, the owner of the calls."""

    def worker_ready(self, worker: WorkerProcess) -> None:
        """``worker`` was promoted to ACTIVE: calls may be placed on it."""

    def worker_exited(self, worker: WorkerProcess) -> None:
        """``worker`` is dead and reaped (``exit_reason`` set): settle what it held."""

    def idle(self, worker: WorkerProcess) -> bool:
        """It holds no call (a DRAINING worker is then sent SHUTDOWN)."""
        ...

    def busy(self, worker: WorkerProcess) -> bool:
        """Its loop thread runs a call, so it sends no heartbeat meanwhile."""
        ...


class Supervisor:
    """Keeps ``config.worker_count`` workers ACTIVE and ``config.spares`` READY in reserve.

    Built first; the owner of the calls attaches itself as its ``Events`` (``attach``) before the first
    worker is started (``rebalance``)."""

    def __init__(
        self, config: PoolConfig, endpoint: str, workdir: str, send_shutdown: Callable[[WorkerProcess], bool]
    ) -> None:
        self._config, self._endpoint, self._workdir = config, endpoint, workdir
        self._send_shutdown = send_shutdown
        self._events: Events
        self._loop = asyncio.get_running_loop()
        self._args = worker_args(config)
        self.changes = Changes()
        """Notified whenever a worker changes state or exits (``Pool.wait_ready``, ``aclose``)."""
        self.workers: dict[bytes, WorkerProcess] = {}
        self.closing = False
        self._spawned = self._exits = self._spawn_failures = 0
        self._exit_reasons: dict[str, int] = {}
        self._failing_since = 0
        self._next_spawn = 0.0

    def attach(self, events: Events) -> None:
        """``events`` (the dispatcher) hears of every promotion and exit from now on."""
        self._events = events

    def statistics(self) -> SupervisorStatistics:
        states: dict[str, int] = {}
        for w in self.workers.values():
            states[w.state.value] = states.get(w.state.value, 0) + 1
        return SupervisorStatistics(
            states, self._spawned, self._exits, dict(self._exit_reasons), self._spawn_failures
        )

    # -- spawning ------------------------------------------------------------
    def spawn(self) -> WorkerProcess | None:
        identity = secrets.token_bytes(8)
        command = worker_command(self._endpoint, identity, self._args, probe=self._config.probe)
        try:
            process = LocalProcess.start(command, self._workdir)
        except OSError as exc:
            log.error("cannot start a worker: %s", exc)
            self._spawn_failures += 1
            return None
        worker = self._record(identity, process)
        self._loop.add_reader(process.pidfd, self._guarded, self._on_exit, worker)
        self._loop.add_reader(process.stderr_fd, self._guarded, self._on_stderr, worker)
        return worker

    def _record(self, identity: bytes, process: Process) -> WorkerProcess:
        now = time.monotonic()
        worker = WorkerProcess(identity.hex()[:8], identity, process, now, last_seen=now)
        self.workers[identity] = worker
        self._spawned += 1
        return worker

    @staticmethod
    def _guarded(callback: Callable[[WorkerProcess], None], worker: WorkerProcess) -> None:
        try:
            callback(worker)
        except Exception:  # a reader callback: nothing may escape into the event loop
            log.exception("supervising worker %s failed", worker.id)

    def _on_stderr(self, worker: WorkerProcess) -> None:
        process = worker.process
        assert isinstance(process, LocalProcess)
        data = process.read_output()
        if data is None:
            return
        if not data:
            self._loop.remove_reader(process.stderr_fd)
            return
        worker.stderr_tail += data
        del worker.stderr_tail[:-_STDERR_TAIL]

    def _on_exit(self, worker: WorkerProcess) -> None:
        process = worker.process
        assert isinstance(process, LocalProcess)
        self._loop.remove_reader(process.pidfd)
        returncode = process.reap()
        while data := process.read_output():  # what is left, then close
            worker.stderr_tail += data
        del worker.stderr_tail[:-_STDERR_TAIL]
        self._loop.remove_reader(process.stderr_fd)
        process.close_output()
        self.exited(worker, returncode)

    def exited(self, worker: WorkerProcess, returncode: int | None) -> None:
        """``worker`` is reaped (here by its pidfd, or by the node that ran it): settle it, replace it."""
        self.workers.pop(worker.identity, None)
        was_ready = worker.ready_at > 0
        worker.state = WorkerState.DEAD
        worker.exit_reason = self.exit_reason(worker, returncode)
        self._exits += 1
        key = worker.kill_reason.value if worker.kill_reason else ("goodbye" if worker.goodbye else "crash")
        self._exit_reasons[key] = self._exit_reasons.get(key, 0) + 1
        if not was_ready and not self.closing and worker.process.local:  # a node paces its own
            self._spawn_failures += 1
            self._failing_since += 1
            self._next_spawn = time.monotonic() + min(5.0, 0.05 * 2**self._failing_since)
            log.warning("worker %s exited before READY: %s", worker.id, worker.exit_reason)
        self._events.worker_exited(worker)
        self.changes.notify()
        self.rebalance()

    @staticmethod
    def exit_reason(worker: WorkerProcess, returncode: int | None) -> str:
        text = describe_exit(returncode)
        if worker.kill_reason:
            text = f"killed by the pool ({worker.kill_reason}): {text}"
        elif worker.goodbye:
            text = f"retired ({worker.goodbye}): {text}"
        lines = worker.stderr_tail.decode("utf-8", "replace").strip().splitlines()
        telling = [
            ln for ln in lines if any(k in ln for k in ("memory allocation", "panicked", "Error", "error"))
        ]
        if lines and not worker.goodbye:
            text += f"; stderr: {(telling or lines)[-1][:200]}"
        return text

    def adopt(self, identity: bytes, process: Process) -> WorkerProcess:
        """A node started a worker for this pool: supervise it like a local one until its node reports
        its exit.

        Remote workers are not counted in ``workers``/``spares`` (their node keeps its own number
        running) and are promoted to ACTIVE as soon as they are READY.
        """
        return self._record(identity, process)

    def drain(self, worker: WorkerProcess) -> None:
        """Place nothing new on ``worker``; SHUTDOWN it once it holds no call (its node is leaving)."""
        if worker.state in (WorkerState.STARTING, WorkerState.SPARE, WorkerState.ACTIVE):
            worker.state = WorkerState.DRAINING
            self.changes.notify()
            self.drained(worker)

    # -- messages, READY and sizing -------------------------------------------
    def heard(self, identity: bytes) -> WorkerProcess | None:
        """Any message from ``identity`` shows it alive; its record, or ``None`` for an unknown peer."""
        worker = self.workers.get(identity)
        if worker is not None:
            worker.last_seen = time.monotonic()
        return worker

    def on_message(self, worker: WorkerProcess, message: Ready | Heartbeat | Goodbye) -> None:
        """The process-level messages (the pool's inbox routes the rest to the dispatcher)."""
        if isinstance(message, Ready):
            self.accept_ready(worker, message)
        elif isinstance(message, Goodbye):
            worker.goodbye = message.reason

    def accept_ready(self, worker: WorkerProcess, ready: Ready) -> bool:
        """Validate READY (pid, version); a worker that lies is killed."""
        if worker.state is not WorkerState.STARTING:
            return False
        if ready.pid != worker.pid or not SUPPORTED_VERSIONS.intersection(ready.versions):
            self.kill(worker, KillReason.PROTOCOL)
            return False
        now = time.monotonic()
        worker.state, worker.ready_at, worker.capacity = WorkerState.SPARE, now, ready.capacity
        worker.sandbox, worker.probe = ready.sandbox, ready.probe
        self._failing_since = 0
        self.rebalance()
        self.changes.notify()
        return True

    def starting(self) -> int:
        """Local workers spawned whose connection has not said READY yet."""
        return self._count(WorkerState.STARTING)

    def _count(self, *states: WorkerState) -> int:
        """Local workers in ``states`` (the pool sizes only its own processes)."""
        return sum(1 for w in self.workers.values() if w.state in states and w.process.local)

    def rebalance(self) -> None:
        """Promote spares to fill ACTIVE slots, then start processes until spares are warm again."""
        if self.closing:
            return
        for worker in self.workers.values():
            if worker.state is not WorkerState.SPARE or not self.alive(worker):
                continue
            if worker.process.local and self._count(WorkerState.ACTIVE) >= self._config.worker_count:
                continue  # remote workers are not counted: their node keeps its own number running
            worker.state = WorkerState.ACTIVE
            self._events.worker_ready(worker)
            self.changes.notify()
        wanted = self._config.worker_count + self._config.spares
        have = self._count(WorkerState.ACTIVE, WorkerState.SPARE, WorkerState.STARTING)
        if have < wanted and time.monotonic() >= self._next_spawn:
            for _ in range(wanted - have):
                self.spawn()

    @property
    def spawn_failing(self) -> bool:
        return self._failing_since >= 5 and not self._count(WorkerState.ACTIVE)

    # -- killing, recycling, watchdog -----------------------------------------
    def kill(self, worker: WorkerProcess, reason: KillReason) -> bool:
        """SIGKILL now; the first reason given is the one reported (``True`` if it is this one)."""
        if worker.state is WorkerState.DEAD:
            return False
        first = not worker.kill_reason
        if first:
            worker.kill_reason = reason
        worker.process.kill()
        return first

    def alive(self, worker: WorkerProcess) -> bool:
        """Not exited, even if its pidfd has not been served yet (a CALL sent to it would be lost).

        A process found dead here is marked DEAD at once; its pidfd reaps it and settles its calls.
        """
        if worker.state is WorkerState.DEAD:
            return False
        if worker.process.alive():
            return True
        worker.state = WorkerState.DEAD
        return False

    def call_ended(self, worker: WorkerProcess) -> None:
        """The worker answered a call: count it (recycling), and stop it if it was draining and is idle."""
        worker.calls += 1
        if worker.state is WorkerState.DRAINING:
            self.drained(worker)

    def is_stopped(self, worker: WorkerProcess) -> bool:
        """A SIGSTOPped worker is frozen by someone else: its calls did not cause their deadline."""
        return worker.process.stopped()

    def tick(self, now: float) -> None:
        """Periodic checks: spawn timeouts, liveness, memory, recycling, SHUTDOWN grace."""
        deadlines, recycling = self._config.deadlines, self._config.recycling
        silent_limit = deadlines.heartbeat * deadlines.liveness
        for worker in list(self.workers.values()):
            if worker.state is WorkerState.STARTING:
                if now - worker.started > deadlines.spawn:
                    self.kill(worker, KillReason.SPAWN_TIMEOUT)
                continue
            if worker.shutdown_sent and now - worker.shutdown_sent > deadlines.shutdown_grace:
                self.kill(worker, KillReason.SHUTDOWN_GRACE_EXPIRED)
            elif now - worker.last_seen > silent_limit and not self._events.busy(worker):
                # blames the one call running, if only one was (outcomes.blame); a frozen one nobody
                self.kill(worker, KillReason.FROZEN if self.is_stopped(worker) else KillReason.HEARTBEAT_LOST)
            if (
                worker.state is WorkerState.ACTIVE
                and worker.process.local  # a node recycles its own
                and (
                    worker.calls >= recycling.max_calls
                    or now - worker.ready_at >= recycling.max_age
                    or (worker.rss_base and worker.rss - worker.rss_base > recycling.max_rss_growth)
                )
            ):
                self.retire(worker)
        self.rebalance()

    def watch_memory(self) -> None:
        """psutil watchdog: kill a worker over ``watchdog_rss_bytes`` (its running call is blamed)."""
        limit = self._config.limits.watchdog_rss_bytes
        for worker in list(self.workers.values()):
            rss = worker.process.memory()
            if rss is None:
                continue
            worker.rss = rss
            if worker.calls and not worker.rss_base:
                worker.rss_base = worker.rss
            if worker.rss > limit:
                self.kill(worker, KillReason.MEMORY)  # blames the call running at the death, if one was

    def retire(self, worker: WorkerProcess) -> None:
        """Recycle without failing or delaying a call: only when a warm spare can take the slot."""
        if not any(w.state is WorkerState.SPARE for w in self.workers.values()):
            if not any(w.state is WorkerState.STARTING for w in self.workers.values()):
                self.spawn()  # with spares=0 nothing else would warm up a replacement
            return
        worker.state = WorkerState.DRAINING
        self.rebalance()
        self.drained(worker)

    def drained(self, worker: WorkerProcess) -> None:
        """Called when a DRAINING worker may have finished its last call."""
        if worker.state is WorkerState.DRAINING and not worker.shutdown_sent and self._events.idle(worker):
            worker.shutdown_sent = time.monotonic()
            if not self._send_shutdown(worker):
                self.kill(worker, KillReason.UNREACHABLE)

    async def aclose(self) -> None:
        """SHUTDOWN everyone, wait ``shutdown_grace``, SIGKILL the rest, reap all: no orphans, no zombies."""
        self.closing = True
        for worker in list(self.workers.values()):
            if worker.state is WorkerState.STARTING or not self._send_shutdown(worker):
                self.kill(worker, KillReason.POOL_CLOSED)
            worker.shutdown_sent = worker.shutdown_sent or time.monotonic()
        await self.changes.wait_until(lambda: not self.workers, self._config.deadlines.shutdown_grace)
        for worker in list(self.workers.values()):
            self.kill(worker, KillReason.POOL_CLOSED)
        await self.changes.wait_until(lambda: not self.workers, 5.0)
        for worker in list(self.workers.values()):  # its exit never reported (should not happen): by hand
            if isinstance(worker.process, LocalProcess):
                self._on_exit(worker)  # SIGKILLed above: its wait is short
            else:  # its node is gone or silent: nobody else will report it
                self.exited(worker, None)
