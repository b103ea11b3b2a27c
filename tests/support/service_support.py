"""Start ``rhaipool serve`` as a real process on 127.0.0.1 for the service and client tests.

The service runs as ``python -m coordinator serve --config FILE`` with a real SQLite file, real
workers and, for providers, the stand-in API in a thread of the test process.
"""

from __future__ import annotations

import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import pytest

from coordinator.client import Client

__all__ = ["ADMIN", "TOKENS", "ServiceProcess", "free_port", "sha", "small_tmpfs", "write_config"]

TOKENS = {"acme": "acme-secret-token", "globex": "globex-secret-token"}
ADMIN = "admin-secret-token"
REPO = Path(__file__).resolve().parents[2]


def sha(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def write_config(
    folder: Path,
    *,
    port: int,
    standin: str | None = None,
    tenants: dict[str, str] | None = None,
    extra: str = "",
    workers: int = 2,
) -> Path:
    """A service config; ``standin`` is the stand-in API's base URL for the ``groq`` provider table."""
    lines = [
        "[serve]",
        f'listen = "127.0.0.1:{port}"',
        'database = "state/rhaipool.db"',
        f'admin_token_sha256 = "{sha(ADMIN)}"',
        f"workers = {workers}",
        "grace_secs = 3",
        extra,
    ]
    for tenant, token in (TOKENS if tenants is None else tenants).items():
        lines += [f"[tenants.{tenant}]", f'token_sha256 = "{sha(token)}"']
        if standin:  # the operator's table reaches a tenant only when granted
            lines.append('providers = ["groq"]')
    if standin:
        lines += [
            "[model_providers.groq]",
            'api_key = "test-key"',
            f'base_url = "{standin}"',
            'egress_allow = ["127.0.0.1"]',
        ]
    path = folder / "serve.toml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@dataclass
class ServiceProcess:
    """One running service."""

    config: Path
    port: int
    process: subprocess.Popen[bytes]

    @classmethod
    def start(cls, config: Path, port: int, *, wait: float = 60.0, log_json: bool = True) -> ServiceProcess:
        with (config.parent / "service.log").open("ab") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "coordinator", "serve", "--config", str(config)]
                + (["--log-json"] if log_json else []),
                stdout=log, stderr=log, cwd=config.parent, env={**os.environ, "PYTHONUNBUFFERED": "1"},
            )  # fmt: skip
        service = cls(config, port, process)
        service.wait_ready(wait)
        return service

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_ready(self, wait: float) -> None:
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"service exited {self.process.returncode}: {self.log()[-2000:]}")
            try:
                if httpx.get(self.url + "/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise RuntimeError(f"service not ready within {wait} s: {self.log()[-2000:]}")

    def log(self) -> str:
        return (self.config.parent / "service.log").read_text(errors="replace")

    def client(self, tenant: str | None = "acme", *, token: str | None = None) -> Client:
        return Client(self.url, token if token is not None else (TOKENS[tenant] if tenant else ADMIN))

    def children(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.process.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 30.0) -> int:
        """Signal and wait; the exit code. Workers must be gone too."""
        children = self.children()
        if self.process.poll() is None:
            self.process.send_signal(sig)
        code = self.process.wait(timeout)
        _gone, alive = psutil.wait_procs(children, timeout=10)
        for proc in alive:
            proc.kill()
        assert not alive, f"workers outlived the service: {alive}"
        return code

    def kill9(self) -> None:
        self.stop(signal.SIGKILL)


@contextmanager
def small_tmpfs(mount: Path, options: str) -> Iterator[Path]:
    """``mount`` (an empty folder) as a tmpfs with ``options`` (``size=4m``...) for a disk that fills up
    for real; mounting needs root, so elsewhere the test is skipped, saying why."""
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(mount)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (root only): {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)
