"""Spawn, watch, kill, recycle and reap worker processes; say why each one exited.

    spawn ──Popen(python -I -m worker)──▶ STARTING ──READY──▶ SPARE ──promote──▶ ACTIVE
                                              │                                  │ recycle: a spare is
              pidfd readable (exit, < 1 ms) ◀─┴──────────────────────────────────┤ promoted first, then
                       │                                                         ▼ SHUTDOWN → GOODBYE
                       └──▶ reap (waitpid) → exit reason → Events.worker_exited ◀─ DRAINING

Owns: processes, pidfds, stderr tails, the memory watchdog, recycling decisions
and pool sizing (``workers`` active + ``spares`` warm).  Does not own calls: the
dispatcher is told about every READY and every exit and settles the calls.
Kill policy: SHUTDOWN, ``shutdown_grace`` seconds, then SIGKILL (workers have
no children of their own).
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

from coordinator._core import outcomes
from coordinator._core.config import PoolConfig
from coordinator._core.workers import Worker, WorkerState, describe_exit
from proto import SUPPORTED_VERSIONS, Ready

__all__ = ["Events", "Supervisor"]

log = logging.getLogger(__name__)

_STDERR_TAIL: Final = 4096
_WORKER_ENV: Final = {
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "MALLOC_ARENA_MAX": "2",
}


class Events(Protocol):
    def worker_ready(self, worker: Worker) -> None: ...
    def worker_exited(self, worker: Worker) -> None: ...


class Supervisor:
    """Keeps ``config.worker_count`` workers ACTIVE and ``config.spares`` READY in reserve."""

    def __init__(
        self, config: PoolConfig, endpoint: str, workdir: str, send_shutdown: Callable[[Worker], bool]
    ) -> None:
        self._config, self._endpoint, self._workdir = config, endpoint, workdir
        self._send_shutdown = send_shutdown
        self._loop = asyncio.get_running_loop()
        self.events: Events | None = None
        self.workers: dict[bytes, Worker] = {}
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
        return cmd + (["--probe"] if self._config.probe else [])

    def spawn(self) -> Worker | None:
        identity = secrets.token_bytes(8)
        try:
            process = subprocess.Popen(
                self._command(identity), env=dict(_WORKER_ENV), cwd=self._workdir, stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, close_fds=True,
                start_new_session=True,  # not in the coordinator's process group: no group signal reaches both
            )  # fmt: skip
        except OSError as exc:
            log.error("cannot start a worker: %s", exc)
            self.spawn_failures += 1
            return None
        now = time.monotonic()
        worker = Worker(identity.hex()[:8], identity, process, now, last_seen=now)
        worker.pidfd = os.pidfd_open(process.pid)
        self._loop.add_reader(worker.pidfd, self._guarded, self._on_exit, worker)
        assert process.stderr is not None
        os.set_blocking(process.stderr.fileno(), False)
        self._loop.add_reader(process.stderr.fileno(), self._guarded, self._on_stderr, worker)
        self.workers[identity] = worker
        self.spawned += 1
        return worker

    @staticmethod
    def _guarded(callback: Callable[[Worker], None], worker: Worker) -> None:
        try:
            callback(worker)
        except Exception:  # a reader callback: nothing may escape into the event loop
            log.exception("supervising worker %s failed", worker.id)

    def _on_stderr(self, worker: Worker) -> None:
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

    def _on_exit(self, worker: Worker) -> None:
        self._loop.remove_reader(worker.pidfd)
        os.close(worker.pidfd)
        returncode = worker.process.wait()
        if worker.process.stderr is not None:
            with contextlib.suppress(OSError):
                self._on_stderr(worker)  # read what is left, then close
            self._loop.remove_reader(worker.process.stderr.fileno())
            worker.process.stderr.close()
        self.workers.pop(worker.identity, None)
        was_ready = worker.state is not WorkerState.STARTING
        worker.state = WorkerState.DEAD
        worker.exit_reason = self.exit_reason(worker, returncode)
        self.exits += 1
        key = worker.kill_reason or ("goodbye" if worker.goodbye else "crash")
        self.exit_reasons[key] = self.exit_reasons.get(key, 0) + 1
        if not was_ready and not self.closing:
            self.spawn_failures += 1
            self._failing_since += 1
            self._next_spawn = time.monotonic() + min(5.0, 0.05 * 2**self._failing_since)
            log.warning("worker %s exited before READY: %s", worker.id, worker.exit_reason)
        if self.events is not None:
            self.events.worker_exited(worker)
        self.rebalance()

    @staticmethod
    def exit_reason(worker: Worker, returncode: int | None) -> str:
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

    # -- READY and sizing ----------------------------------------------------
    def accept_ready(self, worker: Worker, ready: Ready) -> bool:
        """Validate READY (pid, version); a worker that lies is killed."""
        if worker.state is not WorkerState.STARTING:
            return False
        if ready.pid != worker.pid or not SUPPORTED_VERSIONS.intersection(ready.versions):
            self.kill(worker, "protocol")
            return False
        now = time.monotonic()
        worker.state, worker.ready_at, worker.capacity = WorkerState.SPARE, now, ready.capacity
        worker.sandbox, worker.probe = ready.sandbox, ready.probe
        self._failing_since = 0
        self.rebalance()
        return True

    def _count(self, *states: WorkerState) -> int:
        return sum(1 for w in self.workers.values() if w.state in states)

    def rebalance(self) -> None:
        """Promote spares to fill ACTIVE slots, then start processes until spares are warm again."""
        if self.closing:
            return
        for worker in self.workers.values():
            if self._count(WorkerState.ACTIVE) >= self._config.worker_count:
                break
            if worker.state is WorkerState.SPARE:
                worker.state = WorkerState.ACTIVE
                if self.events is not None:
                    self.events.worker_ready(worker)
        wanted = self._config.worker_count + self._config.spares
        have = self._count(WorkerState.ACTIVE, WorkerState.SPARE, WorkerState.STARTING)
        if have < wanted and time.monotonic() >= self._next_spawn:
            for _ in range(wanted - have):
                self.spawn()

    @property
    def spawn_failing(self) -> bool:
        return self._failing_since >= 5 and not self._count(WorkerState.ACTIVE)

    # -- killing, recycling, watchdog -----------------------------------------
    def kill(self, worker: Worker, reason: str, target: object = None) -> None:
        """SIGKILL now; the first reason given is the one reported."""
        if worker.state is WorkerState.DEAD:
            return
        if not worker.kill_reason:
            worker.kill_reason, worker.kill_target = reason, target  # type: ignore[assignment]
        with contextlib.suppress(ProcessLookupError):
            os.kill(worker.pid, signal.SIGKILL)

    def is_stopped(self, worker: Worker) -> bool:
        """A SIGSTOPped worker is frozen by someone else: its calls did not cause their deadline."""
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
                    self.kill(worker, "spawn timeout")
                continue
            if worker.shutdown_sent and now - worker.shutdown_sent > deadlines.shutdown_grace:
                self.kill(worker, "shutdown grace expired")
            elif not worker.inline and now - worker.last_seen > silent_limit:
                self.kill(worker, "heartbeat lost")
            if worker.state is WorkerState.ACTIVE and (
                worker.calls >= recycling.max_calls
                or now - worker.ready_at >= recycling.max_age
                or (worker.rss_base and worker.rss - worker.rss_base > recycling.max_rss_growth)
            ):
                self.retire(worker)
        self.rebalance()

    def watch_memory(self) -> None:
        """psutil watchdog: kill a worker over ``watchdog_rss_bytes`` (its running call is blamed)."""
        limit = self._config.limits.watchdog_rss_bytes
        for worker in list(self.workers.values()):
            try:
                worker.rss = psutil.Process(worker.pid).memory_info().rss
            except psutil.Error:
                continue
            if worker.calls and not worker.rss_base:
                worker.rss_base = worker.rss
            if worker.rss > limit:
                running = outcomes.running(worker)
                self.kill(worker, "memory", running[0] if len(running) == 1 else None)

    def retire(self, worker: Worker) -> None:
        """Recycle without failing or delaying a call: only when a warm spare can take the slot."""
        if not any(w.state is WorkerState.SPARE for w in self.workers.values()):
            if not any(w.state is WorkerState.STARTING for w in self.workers.values()):
                self.spawn()  # with spares=0 nothing else would warm up a replacement
            return
        worker.state = WorkerState.DRAINING
        self.rebalance()
        self.drained(worker)

    def drained(self, worker: Worker) -> None:
        """Called when a DRAINING worker may have finished its last call."""
        if worker.state is WorkerState.DRAINING and worker.idle and not worker.shutdown_sent:
            worker.shutdown_sent = time.monotonic()
            if not self._send_shutdown(worker):
                self.kill(worker, "unreachable")

    async def aclose(self) -> None:
        """SHUTDOWN everyone, wait ``shutdown_grace``, SIGKILL the rest, reap all: no orphans, no zombies."""
        self.closing = True
        for worker in list(self.workers.values()):
            if worker.state is WorkerState.STARTING or not self._send_shutdown(worker):
                self.kill(worker, "pool closed")
            worker.shutdown_sent = worker.shutdown_sent or time.monotonic()
        deadline = time.monotonic() + self._config.deadlines.shutdown_grace
        while self.workers and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for worker in list(self.workers.values()):
            self.kill(worker, "pool closed")
        deadline = time.monotonic() + 5.0
        while self.workers and time.monotonic() < deadline:
            await asyncio.sleep(0.005)
        for worker in list(self.workers.values()):  # pidfd never fired (should not happen): reap by hand
            worker.process.wait(timeout=1.0)
            self._on_exit(worker)
