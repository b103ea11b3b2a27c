"""A worker's operating-system process, wherever it runs, and the one way a worker is started.

    Process (protocol)  kill · alive · memory · stopped · reap
      ├─ LocalProcess   a child of this process: Popen + pidfd + stderr pipe (the pool, and a node)
      └─ RemoteWorker   run by a node on another machine (``coordinator.nodes.records``): its node
                        reports its exit and memory, and a kill is a message to it

``worker_command`` builds a worker's command line and ``LocalProcess.start`` spawns it, for the pool's
supervisor and for a node alike (a node gets the limits from its coordinator's WELCOME, which carries
``worker_args``): the two start workers the same way, in the environment ``WORKER_ENV``.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Final, Protocol

import psutil

if TYPE_CHECKING:
    from coordinator._core.config import PoolConfig

__all__ = ["WORKER_ENV", "LocalProcess", "Process", "worker_args", "worker_command"]

WORKER_ENV: Final = {  # the whole environment of a worker
    "PATH": "/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "MALLOC_ARENA_MAX": "2",
    # The binding allocates with mimalloc, which reserves 1 GiB of address space at start-up by default:
    # under the worker's RLIMIT_AS that reservation would crowd out the call stacks of concurrent calls.
    "MIMALLOC_ARENA_RESERVE": "64MiB",
}


def worker_args(config: PoolConfig) -> dict[str, int | float]:
    """The command-line limits of every worker of a pool, here and on its nodes (``Welcome.worker_args``)."""
    limits = config.limits
    return {
        "memory-bytes": limits.memory_bytes,
        "cpu-seconds": limits.cpu_seconds,
        "open-files": limits.open_files,
        "file-size": limits.file_size,
        "heartbeat": config.deadlines.heartbeat,
        "capacity": config.provider_capacity,
        "resident-lists": config.resident_max_lists,
        "resident-bytes": config.resident_max_bytes,
    }


def worker_command(
    endpoint: str, identity: bytes, args: Mapping[str, int | float], *, probe: bool = False
) -> list[str]:
    """``python -I -m worker`` connecting to ``endpoint`` as ``identity``, its parent this process.

    ``args``: ``worker_args``' numbers (option name without ``--``); ``probe``: the test-only sandbox
    probes (``PoolConfig.probe``; a node's workers never run them).
    """
    command = [sys.executable, "-I", "-m", "worker", "--connect", endpoint, "--identity", identity.hex()]
    command += ["--parent-pid", str(os.getpid())]
    for key, value in sorted(args.items()):
        command += [f"--{key}", str(value)]
    return command + (["--probe"] if probe else [])


class Process(Protocol):
    """What the supervisor needs of a worker's process, local or remote."""

    @property
    def pid(self) -> int: ...

    @property
    def local(self) -> bool:
        """This machine spawned it (counted in ``PoolConfig.workers``/``spares``, paced and recycled
        here); ``False`` for a node's worker (its node keeps its own number running)."""
        ...

    @property
    def group(self) -> str:
        """The node group it runs in (``rhaipool node --group``); ``""`` when local."""
        ...

    @property
    def returncode(self) -> int | None:
        """Its exit status once reaped (or reported by its node), else ``None``."""
        ...

    def kill(self) -> None:
        """SIGKILL it (a remote one: ask its node to); nothing if it is gone already."""

    def alive(self) -> bool:
        """Not exited, as far as can be told now (a remote one: until its node reports the exit)."""
        ...

    def memory(self) -> int | None:
        """Resident bytes now; ``None`` if it cannot be read (it is exiting)."""
        ...

    def stopped(self) -> bool:
        """It is SIGSTOPped (frozen by someone else); never for a remote one."""
        ...

    def reap(self, timeout: float | None = None) -> int | None:
        """Collect its exit status and release what watches it; ``None`` if unknown (remote, or a wait
        beyond ``timeout``)."""
        ...


class LocalProcess:
    """A worker spawned on this machine, watched through its pidfd, its stderr a non-blocking pipe."""

    local: Final = True
    group: Final = ""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        assert popen.stderr is not None
        self.popen, self.pid = popen, popen.pid
        self.pidfd = os.pidfd_open(popen.pid)
        self.stderr_fd = popen.stderr.fileno()
        os.set_blocking(self.stderr_fd, False)

    @classmethod
    def start(cls, command: list[str], workdir: str) -> LocalProcess:
        """Spawn ``command`` (``worker_command``) in ``workdir``; ``OSError`` if it cannot start."""
        popen = subprocess.Popen(
            command, env=dict(WORKER_ENV), cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE, close_fds=True,
            start_new_session=True,  # not in the parent's process group: no group signal reaches both
        )  # fmt: skip
        try:
            return cls(popen)
        except OSError:
            popen.kill()
            popen.wait()
            raise

    @property
    def returncode(self) -> int | None:
        return self.popen.returncode

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)

    def alive(self) -> bool:
        """Not exited, even if its pidfd has not been served yet (``waitid`` without reaping)."""
        if self.popen.returncode is not None:
            return False
        try:
            exited = os.waitid(os.P_PIDFD, self.pidfd, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except (ChildProcessError, OSError):
            exited = None
        return exited is None

    def memory(self) -> int | None:
        """Its RSS; ``None`` when it cannot be read (gone, or this process out of descriptors: EMFILE)."""
        try:
            return int(psutil.Process(self.pid).memory_info().rss)
        except (psutil.Error, OSError):
            return None

    def stopped(self) -> bool:
        try:
            return bool(psutil.Process(self.pid).status() == psutil.STATUS_STOPPED)
        except (psutil.Error, OSError):
            return False

    def read_output(self) -> bytes | None:
        """What its stderr has now: ``b""`` at its end (or on an error), ``None`` if nothing yet."""
        try:
            return os.read(self.stderr_fd, 65536)
        except BlockingIOError:
            return None
        except (OSError, ValueError):
            return b""

    def reap(self, timeout: float | None = None) -> int | None:
        """Wait for its exit status, then close its pidfd and stderr (read what is left first)."""
        try:
            returncode = self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            return None
        if self.pidfd >= 0:
            os.close(self.pidfd)
            self.pidfd = -1
        return returncode

    def close_output(self) -> None:
        """Close its stderr pipe (after its last bytes were read)."""
        if self.popen.stderr is not None:
            self.popen.stderr.close()
