"""``rhaipool keys generate|list|revoke``: the CurveZMQ key files of the coordinator and its nodes.

The work is in :mod:`coordinator.nodes.keys`; this module only parses arguments and prints.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from coordinator.nodes.keys import KeyFileError, generate, list_keys, read_public_key, revoke

__all__ = ["keys"]

_DIR = click.Path(file_okay=False, path_type=Path)


def _fail(exc: KeyFileError) -> None:
    click.echo(click.style(f"error: {exc}", fg="red"), err=True)
    sys.exit(1)


@click.group()
def keys() -> None:
    """CurveZMQ key files: a key directory is also an authorized-keys directory ([nodes] authorized_keys)."""


@keys.command("generate")
@click.argument("directory", type=_DIR)
@click.argument("name")
def generate_command(directory: Path, name: str) -> None:
    """Write DIRECTORY/NAME.key (public, 0644) and DIRECTORY/NAME.key_secret (0600); never overwrites."""
    try:
        public, secret = generate(directory, name)
    except KeyFileError as exc:
        _fail(exc)
    click.echo(f"public key  {public}")
    click.echo(f"secret key  {secret}")
    click.echo(f"z85         {read_public_key(public).decode('ascii')}")


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
        _fail(exc)
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
def revoke_command(directory: Path, name: str) -> None:
    """Move NAME's key files into DIRECTORY/revoked: refused at its next handshake, no restart needed."""
    try:
        target = revoke(directory, name)
    except KeyFileError as exc:
        _fail(exc)
    click.echo(f"revoked {name}: moved to {target}")
