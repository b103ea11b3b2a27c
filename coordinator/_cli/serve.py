"""``rhaipool serve --config FILE`` and ``rhaipool status [--json] [--server URL]``."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import click

from coordinator._cli.output import emit_error

__all__ = ["COMMANDS", "serve_command", "status_command"]

DEFAULT_SERVER = "http://127.0.0.1:8765"


@click.command("serve")
@click.option(
    "--config", "config_path", required=True, type=click.Path(path_type=Path), help="Service config (TOML)."
)
@click.option(
    "--log-json", is_flag=True, help="Structured JSON logs, one line per call (tenant, script, hash)."
)
def serve_command(config_path: Path, log_json: bool) -> None:
    """Run the pool as an HTTP service until SIGTERM (which drains); SIGHUP reloads the config."""
    from coordinator.service.config import ServiceConfigError, load_service_config
    from coordinator.service.logs import configure
    from coordinator.service.server import serve

    configure(as_json=log_json)
    try:
        config = load_service_config(config_path)
    except ServiceConfigError as exc:
        click.echo(click.style(f"error: {exc}", fg="red"), err=True)
        sys.exit(2)
    import asyncio

    click.echo(
        f"rhaipool serve: listening on {'https' if config.tls_cert else 'http'}://{config.host}:{config.port}",
        err=True,
    )
    asyncio.run(serve(config))


def _mb(value: int) -> str:
    return f"{value / (1 << 20):.1f} MB"


def status_text(doc: dict[str, Any]) -> str:
    """The status document for a person."""
    lines = [
        f"uptime {doc['uptime_secs']:.0f} s{'  DRAINING' if doc['draining'] else ''}",
        (
            f"queue: {doc['queue']['queued']} queued, {doc['queue']['inflight']} at workers, "
            f"{doc['queue']['http_inflight']} HTTP calls in flight"
        ),
        f"workers ({len(doc['workers'])}):",
    ]
    for w in doc["workers"]:
        lines.append(
            f"  {w['id']:<6} pid {w['pid']:<8} {w['state']:<9} {_mb(w['memory_bytes']):>9} "
            f"{w['calls']:>7} calls  sandbox: {', '.join(w['sandbox']) or '-'}"
        )
    lines.append(
        "tenants: " + (", ".join(f"{t['id']} ({t['regions']} regions)" for t in doc["tenants"]) or "-")
    )
    return "\n".join(lines)


@click.command("status")
@click.option(
    "--server", "server", default=None, help=f"Service URL (default $RHAIPOOL_SERVER or {DEFAULT_SERVER})."
)
@click.option("--json", "as_json", is_flag=True, help="Print the status document as JSON.")
def status_command(server: str | None, as_json: bool) -> None:
    """Workers (pid, state, memory, calls, sandbox layers), queues and tenants of a running service."""
    from coordinator.client import Client, ServiceError, token_from_env

    url = server or os.environ.get("RHAIPOOL_SERVER", DEFAULT_SERVER)
    try:
        with Client(url, token_from_env(admin=True)) as client:
            doc = client.status()
    except ServiceError as exc:
        sys.exit(emit_error(exc.message, as_json, 1, "ServiceError"))
    click.echo(json.dumps(doc, ensure_ascii=False) if as_json else status_text(doc))


COMMANDS = (serve_command, status_command)
