"""``rhaipool serve --config FILE`` (``rhaipool status`` is ``coordinator._cli.status``)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

__all__ = ["COMMANDS", "serve_command"]


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
    from coordinator.service.preflight import grant_problems, start_problems
    from coordinator.service.server import serve

    configure(as_json=log_json)
    try:
        config = load_service_config(config_path)
    except ServiceConfigError as exc:
        click.echo(click.style(f"error: {exc}", fg="red"), err=True)
        sys.exit(2)
    problems = start_problems(config)  # files it opens as it starts: one line each, not a traceback
    for problem in problems:
        click.echo(click.style(f"error: {problem}", fg="red"), err=True)
    if problems:
        sys.exit(2)
    for problem in grant_problems(config):
        click.echo(click.style(f"warning: {problem}", fg="yellow"), err=True)
    import asyncio

    click.echo(
        f"rhaipool serve: listening on {'https' if config.tls_cert else 'http'}://{config.host}:{config.port}",
        err=True,
    )
    asyncio.run(serve(config))


COMMANDS = (serve_command,)
