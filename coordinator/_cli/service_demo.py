"""The demo's service half: ``rhaipool serve`` in the background, driven by the HTTP client, then stopped.

Everything stays on 127.0.0.1: a throw-away config (one tenant, a random token, a free port, the
stand-in API for the provider), a temporary SQLite file, and a SIGTERM at the end that drains and
exits 0.
"""

from __future__ import annotations

import hashlib
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from coordinator._cli.demo import EXAMPLES, GROQ_SCRIPT
from coordinator.bench.standin import StandinServer
from coordinator.client import Client, ServiceError

__all__ = ["service_demo"]

_CONFIG = """[serve]
listen = "127.0.0.1:{port}"
database = "rhaipool.db"
workers = 1

[tenants.demo]
token_sha256 = "{sha}"
# the operator's [model_providers.groq] table reaches a tenant only when granted
providers = ["groq"]

[model_providers.groq]
api_key = "demo-key"
base_url = "{base_url}"
egress_allow = ["127.0.0.1"]
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_ready(client: Client, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"rhaipool serve exited with {process.returncode}")
        try:
            client.readyz()
            return
        except ServiceError:
            time.sleep(0.05)
    raise RuntimeError("rhaipool serve did not become ready")


def _drive(client: Client, echo: Callable[[str], None]) -> bool:
    client.put_script("region_hook", "brain", (EXAMPLES / "regions" / "brain.rhai").read_text())
    client.create_region("brain", script="brain", budget=200, persistent=True)
    client.write("brain", "fix the failing test", 6, kind="user_message")
    tool = "ERROR: test_login failed"
    client.write("brain", tool, 6, kind="tool_result", tool_call_id="c1", tool_name="pytest", is_error=True)
    rendered = client.render("brain", stage_name="plan")
    echo(f"  region brain render -> {rendered['messages'][0]['content']}")
    client.put_script("provider", "groq", GROQ_SCRIPT.read_text())
    ask = {"model": "standin-small", "messages": [{"role": "user", "content": "Reply with exactly: PONG"}]}
    answer = client.inference("groq", ask)
    echo(
        f"  provider groq inference -> {answer['content']!r} ({answer['tokens_used']['total_tokens']} tokens)"
    )
    return answer["content"] == "PONG" and "test_login" in rendered["messages"][0]["content"]


def service_demo(echo: Callable[[str], None] = print) -> bool:
    """Start the service, drive a region and a provider through :class:`Client`, stop it (SIGTERM)."""
    token = secrets.token_urlsafe(24)
    port = _free_port()
    with StandinServer() as api, tempfile.TemporaryDirectory(prefix="rhaipool-serve-") as tmp:
        config = Path(tmp) / "serve.toml"
        sha = hashlib.sha256(token.encode()).hexdigest()
        config.write_text(_CONFIG.format(port=port, sha=sha, base_url=api.base_url), encoding="utf-8")
        echo(f"  rhaipool serve --config {config.name}   (127.0.0.1:{port}, one tenant, SQLite in {tmp})")
        process = subprocess.Popen(
            [sys.executable, "-m", "coordinator", "serve", "--config", str(config)],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            with Client(f"http://127.0.0.1:{port}", token) as client:
                _wait_ready(client, process)
                ok = _drive(client, echo)
        finally:
            process.send_signal(signal.SIGTERM)
            code = process.wait(60)
        echo(f"  SIGTERM -> drained and exited {code}")
        return ok and code == 0
