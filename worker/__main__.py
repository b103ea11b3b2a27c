"""``python -m worker``: apply the sandbox while still single-threaded, then serve.

Started only by the coordinator's supervisor, with a clean environment.  Order
matters: the sandbox (namespaces, Landlock, seccomp) must be entered before any
zmq context or thread exists, so nothing but the standard library is imported
before ``enter``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

__all__ = ["main"]

_PR_SET_PDEATHSIG = 1


def _arguments(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m worker", description="rhaipool sandboxed worker")
    parser.add_argument("--connect", required=True, help="coordinator endpoint, e.g. ipc:///run/x/pool.sock")
    parser.add_argument("--identity", required=True, help="hex routing id given by the supervisor")
    parser.add_argument("--parent-pid", type=int, required=True)
    parser.add_argument("--memory-bytes", type=int, default=2 << 30)
    parser.add_argument("--cpu-seconds", type=int, default=3600)
    parser.add_argument("--open-files", type=int, default=64)
    parser.add_argument("--file-size", type=int, default=0)
    parser.add_argument("--heartbeat", type=float, default=0.25)
    parser.add_argument("--capacity", type=int, default=64, help="concurrent threaded (provider) calls")
    parser.add_argument("--resident-lists", type=int, help="region entry lists kept (worker/resident.py)")
    parser.add_argument("--resident-bytes", type=int, help="bytes of region entry lists kept")
    parser.add_argument("--probe", action="store_true", help="test only: run the sandbox probes")
    return parser.parse_args(argv)


def _ipc_dir(endpoint: str) -> str | None:
    """The private directory holding the coordinator's socket (the only path ipc needs)."""
    if endpoint.startswith("ipc://"):
        return os.path.dirname(endpoint[len("ipc://") :]) or None
    return None


def _enter_sandbox(
    args: argparse.Namespace,
) -> tuple[dict[str, Any], dict[str, Any] | None, Callable[[], bool]]:
    """Apply the sandbox (a worker without it must not run a script, so no fallback)."""
    from worker import sandbox

    parent = args.parent_pid
    config = sandbox.SandboxConfig(
        memory_bytes=args.memory_bytes,
        cpu_seconds=args.cpu_seconds,
        open_files=args.open_files,
        file_size=args.file_size,
        parent_pid=parent,
        probe=args.probe,
        ipc_dir=_ipc_dir(args.connect),
    )
    report = dict(sandbox.enter(config))
    probe = (report.pop("probe", None) or report.pop("probes", None)) if args.probe else None
    if os.getppid() != parent:  # the parent died before PDEATHSIG was armed
        os._exit(0)
    return report, probe, lambda: bool(sandbox.parent_alive(parent))


def main(argv: list[str] | None = None) -> int:
    args = _arguments(sys.argv[1:] if argv is None else argv)
    report, probe, parent_alive = _enter_sandbox(args)
    from worker.loop import WorkerLoop  # imports zmq: only after the sandbox is up
    from worker.resident import DEFAULT_MAX_BYTES, DEFAULT_MAX_KEYS, ResidentStore

    loop = WorkerLoop(
        endpoint=args.connect,
        identity=bytes.fromhex(args.identity),
        parent_alive=parent_alive,
        sandbox=report,
        probe=probe,
        heartbeat=args.heartbeat,
        capacity=args.capacity,
        resident=ResidentStore(
            max_keys=args.resident_lists or DEFAULT_MAX_KEYS,
            max_bytes=args.resident_bytes or DEFAULT_MAX_BYTES,
        ),
    )
    return loop.run()


if __name__ == "__main__":
    sys.exit(main())
