"""One real ``python -m worker`` talking to a bare ROUTER socket held by the test (no Pool)."""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import time
from typing import Any

import zmq

from proto import Heartbeat, decode, encode


class BareWorker:
    """A ROUTER socket and one real worker connected to it; tests speak the protocol directly."""

    def __init__(self, tmp: str, *, keep_stderr: bool = False) -> None:
        self.context = zmq.Context()
        self.sock = self.context.socket(zmq.ROUTER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(f"ipc://{tmp}/w.sock")
        self.identity = secrets.token_bytes(8)
        cmd = [sys.executable, "-I", "-m", "worker", "--connect", f"ipc://{tmp}/w.sock"]
        cmd += ["--identity", self.identity.hex(), "--parent-pid", str(os.getpid()), "--heartbeat", "0.2"]
        stderr = subprocess.PIPE if keep_stderr else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, env={"PATH": "/usr/bin:/bin"}, cwd=tmp, stderr=stderr)
        self.ids = iter(range(1, 10**6))

    def send(self, message: Any) -> None:
        self.sock.send_multipart([self.identity, *encode(message)])

    def recv(self, timeout: float = 20.0, skip_heartbeats: bool = True) -> Any:
        """The worker's next message (heartbeats skipped unless asked for)."""
        deadline = time.monotonic() + timeout
        while True:
            if not self.sock.poll(int(max(0.0, deadline - time.monotonic()) * 1000)):
                raise TimeoutError("worker said nothing")
            identity, *frames = self.sock.recv_multipart()
            assert identity == self.identity
            message = decode(frames)
            if not (skip_heartbeats and isinstance(message, Heartbeat)):
                return message

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stderr is not None:
            self.proc.stderr.close()
        self.sock.close()
        self.context.term()
