"""What every benchmark measures the same way: CPU seconds, memory (PSS), percentiles, load.

CPU is read from the kernel's accounting (every thread: ZeroMQ I/O threads and script threads
included) for this process and, separately, for its child processes (the pool's workers); a
process named in ``exclude`` (a stand-in server) is left out. Memory is the proportional set size,
so pages shared between the workers are split rather than counted once per process.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import psutil

__all__ = [
    "CpuClock",
    "CpuSplit",
    "PeakSampler",
    "cpu_seconds",
    "free_port",
    "load_average",
    "percentile_ms",
    "pss_bytes",
]


def percentile_ms(seconds: list[float], q: float) -> float:
    """The ``q`` quantile (0…1) of ``seconds``, in milliseconds (nearest rank)."""
    if not seconds:
        return float("nan")
    ordered = sorted(seconds)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] * 1000


def load_average() -> float:
    """The 1-minute load average: printed beside every figure, since the machine may be shared."""
    return os.getloadavg()[0]


def _children(exclude: Iterable[int]) -> list[psutil.Process]:
    skip = set(exclude)
    return [c for c in psutil.Process().children(recursive=True) if c.pid not in skip]


def cpu_seconds(pid: int) -> float:
    """CPU seconds process ``pid`` has used, every thread (ZeroMQ's I/O threads too), to the nanosecond.

    Read from the process's own CPU clock (Linux: ``clock_getcpuclockid``'s encoding): the kernel's
    user/system split that psutil reads counts in 10 ms ticks, too coarse for calls of tens of µs.
    A process that is gone reads 0.
    """
    if pid == os.getpid():
        return time.process_time()
    try:
        return time.clock_gettime(((~pid) << 3) | 2)
    except OSError:
        pass
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return 0.0
    return float(times.user + times.system)


@dataclass(frozen=True, slots=True)
class CpuSplit:
    """CPU seconds spent by this process (the coordinator) and by its children (the workers)."""

    coordinator: float
    workers: float


class CpuClock:
    """CPU used since ``start()`` by this process and by its children (those alive at the end).

    A child that exits between start and stop takes its CPU with it: benchmarks keep their
    workers alive across a measurement.
    """

    def __init__(self, exclude: Iterable[int] = ()) -> None:
        self._exclude = tuple(exclude)
        self._self0 = 0.0
        self._children0: dict[int, float] = {}

    def start(self) -> None:
        """Take the starting readings."""
        self._self0 = cpu_seconds(os.getpid())
        self._children0 = {c.pid: cpu_seconds(c.pid) for c in _children(self._exclude)}

    def stop(self) -> CpuSplit:
        """CPU seconds since ``start()``."""
        mine = cpu_seconds(os.getpid()) - self._self0
        theirs = sum(cpu_seconds(c.pid) - self._children0.get(c.pid, 0.0) for c in _children(self._exclude))
        return CpuSplit(mine, theirs)


def pss_bytes(exclude: Iterable[int] = ()) -> int:
    """PSS of this process and its children (RSS where the kernel offers no PSS)."""
    total = 0
    for proc in [psutil.Process(), *_children(exclude)]:
        try:
            info = proc.memory_full_info()
        except psutil.Error:
            continue
        total += int(getattr(info, "pss", info.rss))
    return total


class PeakSampler:
    """Samples a measure every ``interval`` seconds while running; keeps the peak.

    Reading PSS parses every process's ``smaps`` (milliseconds of CPU, charged to this process):
    ``cpu_seconds`` is what sampling cost, so a benchmark can take it out of the coordinator's CPU.
    """

    def __init__(self, measure: Callable[[], int], interval: float = 0.2) -> None:
        self.measure = measure
        self.interval = interval
        self.peak = 0
        self.cpu_seconds = 0.0

    async def run(self) -> None:
        """Sample until cancelled."""
        while True:
            start = time.process_time()
            self.peak = max(self.peak, self.measure())
            self.cpu_seconds += time.process_time() - start
            await asyncio.sleep(self.interval)


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (for a service a benchmark starts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
