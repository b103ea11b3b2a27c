"""``coordinator.client`` (async and sync) and the CLI's ``--server`` against a real service."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner
from service_support import TOKENS, ServiceProcess

from coordinator._cli.demo import GROQ_SCRIPT
from coordinator._cli.main import main
from coordinator.client import AsyncClient, ServiceError

PONG = {"model": "standin-small", "messages": [{"role": "user", "content": "Reply with exactly: PONG"}]}


@pytest.fixture(scope="module")
def seeded(service: ServiceProcess) -> ServiceProcess:
    with service.client("acme") as c:
        c.put_script("provider", "groq", GROQ_SCRIPT.read_text())
    return service


def test_async_client_drives_a_region_and_a_provider(seeded: ServiceProcess) -> None:
    async def scenario() -> tuple[str, str, list[str]]:
        async with AsyncClient(seeded.url, TOKENS["acme"]) as c:
            await c.put_script("region_hook", "echo", "fn render(ctx) { ctx.entries[0].content }")
            await c.create_region("r", script="echo", budget=100)
            await c.write("r", "from async", tokens=3)
            render = await c.render("r")
            answer = await c.inference("groq", PONG)
            ask = {"model": "standin-small", "messages": [{"role": "user", "content": "a b c"}]}
            deltas = [item.get("delta") or "" async for item in c.stream("groq", ask)]
            return render["system"][0]["text"], answer["content"], deltas

    text, content, deltas = asyncio.run(scenario())
    assert text == "from async" and content == "PONG"
    assert "".join(deltas).split() == ["echo:", "a", "b", "c"]


def test_async_client_raises_service_errors(seeded: ServiceProcess) -> None:
    async def scenario() -> ServiceError:
        async with AsyncClient(seeded.url, "wrong") as c:
            try:
                await c.list_scripts()
            except ServiceError as exc:
                return exc
        raise AssertionError("no error")

    assert asyncio.run(scenario()).status == 401


def test_unreachable_service_is_status_0() -> None:
    from coordinator.client import Client

    with Client("http://127.0.0.1:9", "t") as c, pytest.raises(ServiceError) as failed:
        c.healthz()
    assert failed.value.status == 0


def _cli_process(seeded: ServiceProcess, *args: str) -> subprocess.CompletedProcess[str]:
    """``rhaipool ARGS --server URL``, the real command line."""
    env = {**os.environ, "RHAIPOOL_TOKEN": TOKENS["acme"]}
    return subprocess.run(
        [sys.executable, "-m", "coordinator", *args, "--server", seeded.url],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def _cli(seeded: ServiceProcess, *args: str) -> Ran:
    """``rhaipool ARGS --server URL`` in this process (click's runner; an escaping exception fails)."""
    env = {"RHAIPOOL_TOKEN": TOKENS["acme"], "RHAIPOOL_SERVER": None, "RHAIPOOL_ADMIN_TOKEN": None}
    result = CliRunner().invoke(main, [*args, "--server", seeded.url], env=env, catch_exceptions=False)
    return Ran(result.exit_code, result.stdout, result.stderr)


def test_cli_commands_run_against_the_service(seeded: ServiceProcess, tmp_path: Path) -> None:
    request = tmp_path / "request.json"
    request.write_text(json.dumps(PONG))
    infer = _cli_process(seeded, "infer", "--provider", "groq", "--request", str(request), "--json")
    assert infer.returncode == 0, infer.stderr
    assert json.loads(infer.stdout)["content"] == "PONG"
    missing = _cli(seeded, "infer", "--provider", "nosuch", "--request", str(request), "--json")
    assert missing.returncode == 1 and json.loads(missing.stdout)["error"]["class"] == "Other"
    valid = _cli(seeded, "validate", str(GROQ_SCRIPT), "--kind", "provider", "--json")
    assert valid.returncode == 0 and json.loads(valid.stdout)["valid"] is True
    broken = tmp_path / "broken.rhai"
    broken.write_text("fn other(ctx) { 1 }")
    invalid = _cli(seeded, "validate", str(broken), "--kind", "region", "--json")
    assert invalid.returncode == 1 and "fn render(ctx)" in json.loads(invalid.stdout)["error"]
    models = _cli(seeded, "models", "list", "--provider", "groq", "--json")
    assert models.returncode == 0 and len(json.loads(models.stdout)["models"]) == 2
    doctor = _cli(seeded, "doctor", "-m", "groq/standin-small", "--json")
    assert doctor.returncode == 0, doctor.stdout
    assert json.loads(doctor.stdout)["inference"]["reply"] == "PONG"
