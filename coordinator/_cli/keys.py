"""``rhaipool keys generate|list|revoke``: the CurveZMQ key files of the coordinator and its nodes.

The work is in :mod:`coordinator.nodes.keys`; this module only parses arguments and prints. Exit codes
follow ``coordinator._cli.output``: 1 when a key already exists (the operation ran and refused), 2 for
bad input (a bad name, a missing directory or key, an unreadable key file).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NoReturn

import click

from coordinator._cli.output import EXIT_FAILED, EXIT_USAGE, fail
from coordinator.nodes.errors import KeyExists, KeyFileError
from coordinator.nodes.keys import generate, list_keys, read_public_key, revoke

__all__ = ["keys"]

_DIR = click.Path(file_okay=False, path_type=Path)


def _fail(exc: KeyFileError, as_json: bool = False) -> NoReturn:
    code = EXIT_FAILED if isinstance(exc, KeyExists) else EXIT_USAGE
    fail(str(exc), as_json, code, type(exc).__name__)


@click.group()
def keys() -> None:
    """CurveZMQ key files: a key directory is also an authorized-keys directory ([nodes] authorized_keys)."""


@keys.command("generate")
@click.argument("directory", type=_DIR)
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help='Print {"name", "public_key", "public", "secret"}.')
def generate_command(directory: Path, name: str, as_json: bool) -> None:
    """Write DIRECTORY/NAME.key (public, 0644) and DIRECTORY/NAME.key_secret (0600); never overwrites."""
    try:
        public, secret = generate(directory, name)
    except KeyFileError as exc:
        _fail(exc, as_json)
    z85 = read_public_key(public).decode("ascii")
    if as_json:
        click.echo(
            json.dumps({"name": name, "public_key": z85, "public": str(public), "secret": str(secret)})
        )
        return
    click.echo(f"public key  {public}")
    click.echo(f"secret key  {secret}")
    click.echo(f"z85         {z85}")


@keys.command("list")
@click.argument("directory", type=_DIR)
@click.option(
    "--json", "as_json", is_flag=True, help='Print [{"name", "public_key", "revoked", "has_secret"}].'
)
def list_command(directory: Path, as_json: bool) -> None:
    """Every key in DIRECTORY and DIRECTORY/revoked: name, public key (z85), whether it is revoked."""
    try:
        found = list_keys(directory)
    except KeyFileError as exc:
        _fail(exc, as_json)
    if as_json:
        rows = [
            {"name": k.name, "public_key": k.public_key, "revoked": k.revoked, "has_secret": k.has_secret}
            for k in found
        ]
        click.echo(json.dumps(rows))
        return
    if not found:
        click.echo(f"no keys in {directory}")
    width = max((len(k.name) for k in found), default=0)
    for k in found:
        state = "revoked" if k.revoked else "authorized"
        secret = "  (secret here)" if k.has_secret else ""
        click.echo(f"{k.name:<{width}}  {k.public_key}  {state}{secret}")


@keys.command("revoke")
@click.argument("directory", type=_DIR)
@click.argument("name")
@click.option(
    "--json", "as_json", is_flag=True, help='Print {"name", "revoked"} (the new path of the public key).'
)
def revoke_command(directory: Path, name: str, as_json: bool) -> None:
    """Move NAME's key files into DIRECTORY/revoked: no restart needed, a running coordinator refuses
    the key at its next handshake and drops a node joined with it within one heartbeat."""
    try:
        target = revoke(directory, name)
    except KeyFileError as exc:
        _fail(exc, as_json)
    if as_json:
        click.echo(json.dumps({"name": name, "revoked": str(target)}))
    else:
        click.echo(f"revoked {name}: moved to {target}")
