"""``python -m worker.sandbox``: apply the sandbox to this process and print its JSON report.

Lets tests prove every layer in a real process without the pool; ``--hold`` keeps
the sandboxed process alive (with the parent watch running) for parent-death tests.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from worker.sandbox import LAYERS, SandboxConfig, enter, start_parent_watch

__all__ = ["main"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m worker.sandbox", description=__doc__)
    parser.add_argument("--probe", action="store_true", help="try forbidden things once the sandbox is up")
    parser.add_argument("--parent-pid", type=int, default=None)
    parser.add_argument("--memory-bytes", type=int, default=SandboxConfig.memory_bytes)
    parser.add_argument("--cpu-seconds", type=int, default=SandboxConfig.cpu_seconds)
    parser.add_argument("--open-files", type=int, default=SandboxConfig.open_files)
    parser.add_argument("--file-size", type=int, default=SandboxConfig.file_size)
    parser.add_argument("--ipc-dir", default=None)
    parser.add_argument("--read-path", action="append", default=[], help="extra read-only path")
    parser.add_argument("--disable", action="append", default=[], choices=LAYERS, help="skip a layer (tests)")
    parser.add_argument("--probe-env", default=SandboxConfig.probe_env)
    parser.add_argument("--probe-port", type=int, default=None)
    parser.add_argument("--probe-unix", default=None, help="a pathname socket outside the ipc dir")
    parser.add_argument("--probe-pid", type=int, default=None, help="cross-process target; default parent")
    parser.add_argument("--watch-interval", type=float, default=0.2, help="parent-liveness poll; 0 = off")
    parser.add_argument("--hold", type=float, default=0.0, help="stay alive N seconds after reporting")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Enter the sandbox, print the report as one JSON line, optionally hold."""
    args = _parser().parse_args(argv)
    parent = args.parent_pid if args.parent_pid is not None else os.getppid()
    config = SandboxConfig(
        memory_bytes=args.memory_bytes,
        cpu_seconds=args.cpu_seconds,
        open_files=args.open_files,
        file_size=args.file_size,
        parent_pid=parent,
        probe=args.probe,
        ipc_dir=args.ipc_dir,
        read_paths=tuple(args.read_path),
        disabled=frozenset(args.disable),
        probe_env=args.probe_env,
        probe_port=args.probe_port,
        probe_unix_path=args.probe_unix,
        probe_pid=args.probe_pid,
    )
    report = enter(config)
    if args.watch_interval > 0:
        start_parent_watch(parent, args.watch_interval)
    sys.stdout.write(json.dumps(report, sort_keys=True) + "\n")
    sys.stdout.flush()
    deadline = time.monotonic() + args.hold
    while time.monotonic() < deadline:
        time.sleep(min(0.1, max(0.0, deadline - time.monotonic())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
