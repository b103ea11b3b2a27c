"""Spawn, watch, kill, recycle and reap worker processes; say why each one exited.

    spawn ──Popen(python -I -m worker)──▶ STARTING ──READY──▶ SPARE ──promote──▶ ACTIVE
                                              │                   Events.worker_ready│ recycle: a spare is
              pidfd readable (exit, < 1 ms) ◀─┴──────────────────────────────────┤ promoted first, then
                       │                                                         ▼ SHUTDOWN → GOODBYE
                       └──▶ reap (waitpid) → exit reason → Events.worker_exited ◀─ DRAINING

Owns the ``WorkerProcess`` records (``coordinator._core.workers``) and writes nothing else:
processes, pidfds, stderr tails, liveness, the memory watchdog, recycling decisions and pool
sizing (``workers`` active + ``spares`` warm).  READY, HEARTBEAT and GOODBYE come to it from the
pool's inbox.  Does not own calls: the ``Events`` it is constructed with (the dispatcher) hear of
every promotion and every exit and settle the calls, and answer the two questions it has about
them (is a worker idle, is its loop thread busy with a call).  Kill policy: SHUTDOWN,
``shutdown_grace`` seconds, then SIGKILL (workers have no children of their own).

Remote workers (run by a node on another machine, ``coordinator.nodes``) are ``adopt``ed with a
``RemoteProcess`` in place of the ``Popen``: the node reports their exit (``exited``) and memory, and
a kill is a message to it.  They are promoted as soon as READY, are not counted in ``workers`` or
``spares`` (their node keeps its own number running) and are not recycled here.

Just past 400 lines: a process's whole life (spawn, watch, kill, reap, replace) is one state machine,
and its transitions read best in one place.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Final, Protocol

import psutil

from coordinator._core.config import PoolConfig
from coordinator._core.waiting import Changes
from coordinator._core.workers import RemoteProcess, WorkerProcess, WorkerState, describe_exit
from proto import SUPPORTED_VERSIONS, Goodbye, Heartbeat, KillReason, Ready

__all__ = ["WORKER_ENV", "Events", "Supervisor"]

log = logging.getLogger(__name__)

_STDERR_TAIL: Final = 4096
WORKER_ENV: Final = {  # the whole environment of a worker (a node starts its own with it too)
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "MALLOC_ARENA_MAX": "2",
    # The binding allocates with mimalloc, which reserves 1 GiB of address space at start-up by default:
    # under the worker's RLIMIT_AS that reservation would crowd out the call stacks of concurrent calls.
    "MIMALLOC_ARENA_RESERVE": "64MiB",
}


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
    """Keeps ``config.worker_count`` workers ACTIVE and ``config.spares`` READY in reserve."""

    def __init__(
        self, config: PoolConfig, endpoint: str, workdir: str, send_shutdown: Callable[[WorkerProcess], bool],
        events: Events,
    ) -> None:  # fmt: skip
        self._config, self._endpoint, self._workdir = config, endpoint, workdir
        self._send_shutdown, self._events = send_shutdown, events
        self._loop = asyncio.get_running_loop()
        self.changes = Changes()
        """Notified whenever a worker changes state or exits (``Pool.wait_ready``, ``aclose``)."""
        self.workers: dict[bytes, WorkerProcess] = {}
        self.closing = False
        self.spawned = self.exits = self.spawn_failures = 0
        self.exit_reasons: dict[str, int] = {}
        self._failing_since = 0
        self._next_spawn = 0.0

    # -- spawning ------------------------------------------------------------
    def _command(self, identity: bytes) -> list[str]:
        limits, deadlines = self._config.limits, self._config.deadlines
        cmd = [
            sys.executable,
            "-I",
            "-m",
            "worker",
            "--connect",
            self._endpoint,
            "--identity",
            identity.hex(),
        ]
        cmd += ["--parent-pid", str(os.getpid()), "--memory-bytes", str(limits.memory_bytes)]
        cmd += ["--cpu-seconds", str(limits.cpu_seconds), "--open-files", str(limits.open_files)]
        cmd += ["--file-size", str(limits.file_size), "--heartbeat", str(deadlines.heartbeat)]
        cmd += ["--capacity", str(self._config.provider_capacity)]
        cmd += ["--resident-lists", str(self._config.resident_max_lists)]
        cmd += ["--resident-bytes", str(self._config.resident_max_bytes)]
        return cmd + (["--probe"] if self._config.probe else [])

    def spawn(self) -> WorkerProcess | None:
        identity = secrets.token_bytes(8)
        try:
            process = subprocess.Popen(
                self._command(identity), env=dict(WORKER_ENV), cwd=self._workdir, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, close_fds=True,
                # not in the coordinator's process group: no group signal reaches both
                start_new_session=True,
            )  # fmt: skip
        except OSError as exc:
            log.error("cannot start a worker: %s", exc)
            self.spawn_failures += 1
            return None
        now = time.monotonic()
        worker = WorkerProcess(identity.hex()[:8], identity, process, now, last_seen=now)
        worker.pidfd = os.pidfd_open(process.pid)
        self._loop.add_reader(worker.pidfd, self._guarded, self._on_exit, worker)
        assert process.stderr is not None
        os.set_blocking(process.stderr.fileno(), False)
        self._loop.add_reader(process.stderr.fileno(), self._guarded, self._on_stderr, worker)
        self.workers[identity] = worker
        self.spawned += 1
        return worker

    @staticmethod
    def _guarded(callback: Callable[[WorkerProcess], None], worker: WorkerProcess) -> None:
        try:
            callback(worker)
        except Exception:  # a reader callback: nothing may escape into the event loop
            log.exception("supervising worker %s failed", worker.id)

    def _on_stderr(self, worker: WorkerProcess) -> None:
        assert worker.process.stderr is not None
        fd = worker.process.stderr.fileno()
        try:
            data = os.read(fd, 65536)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._loop.remove_reader(fd)
            return
        worker.stderr_tail += data
        del worker.stderr_tail[:-_STDERR_TAIL]

    def _on_exit(self, worker: WorkerProcess) -> None:
        self._loop.remove_reader(worker.pidfd)
        os.close(worker.pidfd)
        returncode = worker.process.wait()
        if worker.process.stderr is not None:
            with contextlib.suppress(OSError):
                self._on_stderr(worker)  # read what is left, then close
            self._loop.remove_reader(worker.process.stderr.fileno())
            worker.process.stderr.close()
        self.exited(worker, returncode)

    def exited(self, worker: WorkerProcess, returncode: int | None) -> None:
        """``worker`` is reaped (here by its pidfd, or by the node that ran it): settle it, replace it."""
        self.workers.pop(worker.identity, None)
        was_ready = worker.ready_at > 0
        worker.state = WorkerState.DEAD
        worker.exit_reason = self.exit_reason(worker, returncode)
        self.exits += 1
        key = worker.kill_reason.value if worker.kill_reason else ("goodbye" if worker.goodbye else "crash")
        self.exit_reasons[key] = self.exit_reasons.get(key, 0) + 1
        if not was_ready and not self.closing and worker.remote is None:  # a node paces its own
            self.spawn_failures += 1
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

    def adopt(self, identity: bytes, process: RemoteProcess) -> WorkerProcess:
        """A node started a worker for this pool: supervise it like a local one until its node reports
        its exit.

        Remote workers are not counted in ``workers``/``spares`` (their node keeps its own number
        running) and are promoted to ACTIVE as soon as they are READY.
        """
        now = time.monotonic()
        worker = WorkerProcess(identity.hex()[:8], identity, process, now, last_seen=now)
        self.workers[identity] = worker
        self.spawned += 1
        return worker

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

    def _count(self, *states: WorkerState) -> int:
        """Local workers in ``states`` (the pool sizes only its own processes)."""
        return sum(1 for w in self.workers.values() if w.state in states and w.remote is None)

    def rebalance(self) -> None:
        """Promote spares to fill ACTIVE slots, then start processes until spares are warm again."""
        if self.closing:
            return
        for worker in self.workers.values():
            if worker.state is not WorkerState.SPARE or not self.alive(worker):
                continue
            if worker.remote is None and self._count(WorkerState.ACTIVE) >= self._config.worker_count:
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
        if worker.remote is not None:
            worker.remote.kill()
            return first
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGKILL)
        return first

    def alive(self, worker: WorkerProcess) -> bool:
        """Not exited, even if its pidfd has not been served yet (a CALL sent to it would be lost).

        A process found dead here is marked DEAD at once; its pidfd reaps it and settles its calls.
        """
        if worker.state is WorkerState.DEAD:
            return False
        if worker.remote is not None:
            return True  # its node reports the exit
        try:
            exited = os.waitid(os.P_PIDFD, worker.pidfd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            exited = None
        if exited is None:
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
        if worker.remote is not None:
            return False
        try:
            return bool(psutil.Process(worker.pid).status() == psutil.STATUS_STOPPED)
        except psutil.Error:
            return False

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
                and worker.remote is None
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
            try:
                remote = worker.remote
                worker.rss = (
                    remote.rss if remote is not None else psutil.Process(worker.pid).memory_info().rss
                )
            except psutil.Error:
                continue
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
        for worker in list(self.workers.values()):  # pidfd never fired (should not happen): reap by hand
            if worker.remote is not None:
                self.exited(worker, None)  # its node is gone or silent: nobody else will report it
                continue
            worker.process.wait(timeout=1.0)
            self._on_exit(worker)
