"""``rhaipool scripts put|get|list|rm``: a tenant's scripts on a running service (``/api/scripts``).

The tenant is the token's (``$RHAIPOOL_TOKEN``). ``put`` stores even a script that does not compile (the
service keeps work in progress), but says so and exits 1, so a deploy step notices.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from coordinator._cli.output import EXIT_FAILED, EXIT_OK, EXIT_USAGE, fail
from coordinator._cli.service_access import open_client, report_refusal, service_options
from coordinator.client import Client, ServiceError

__all__ = ["scripts"]

KINDS = ("provider", "region_hook")
_KIND = click.Choice(KINDS)


def _run(server: str | None, config_path: Path | None, as_json: bool, call: Callable[[Client], Any]) -> Any:
    """The service's answer to ``call``, or exit with the refusal."""
    try:
        with open_client(server, config_path, as_json, admin=False) as client:
            return call(client)
    except ServiceError as exc:
        sys.exit(report_refusal(exc, as_json))


def _compile_note(doc: dict[str, Any]) -> str:
    if doc.get("compiles", True):
        return "compiles"
    error = doc.get("error")
    message = error.get("message", error) if isinstance(error, dict) else error
    return f"does NOT compile: {message}"


@click.group()
def scripts() -> None:
    """A tenant's scripts on a running service (token from $RHAIPOOL_TOKEN)."""


@scripts.command("put")
@click.argument("kind", type=_KIND)
@click.argument("name")
@click.argument("file", type=click.Path(dir_okay=False, allow_dash=True, path_type=Path))
@service_options
def put(
    kind: str, name: str, file: Path, server: str | None, config_path: Path | None, as_json: bool
) -> None:
    """Store FILE (`-`: stdin) as the tenant's script KIND/NAME, replacing any script of that name.

    Exits 1 when it does not compile (it is stored all the same).
    """
    try:
        content = sys.stdin.read() if str(file) == "-" else file.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(
            f"cannot read {file}: {getattr(exc, 'strerror', None) or exc}", as_json, EXIT_USAGE, "InputError"
        )
    doc = _run(server, config_path, as_json, lambda c: c.put_script(kind, name, content))
    if as_json:
        click.echo(json.dumps(doc, ensure_ascii=False))
    else:
        click.echo(f"stored {doc['path']} (sha256 {doc['sha256'][:12]}): {_compile_note(doc)}")
    sys.exit(EXIT_OK if doc.get("compiles", True) else EXIT_FAILED)


@scripts.command("get")
@click.argument("kind", type=_KIND)
@click.argument("name")
@service_options
def get(kind: str, name: str, server: str | None, config_path: Path | None, as_json: bool) -> None:
    """Print the source of script KIND/NAME as stored (--json: with its sha256 and compile verdict)."""
    doc = _run(server, config_path, as_json, lambda c: c.get_script(kind, name))
    if as_json:
        click.echo(json.dumps(doc, ensure_ascii=False))
    else:
        click.echo(doc["content"], nl=False)


@scripts.command("list")
@click.option("--kind", type=_KIND, default=None, help="Only scripts of this kind.")
@service_options
def list_(kind: str | None, server: str | None, config_path: Path | None, as_json: bool) -> None:
    """The tenant's scripts: kind/name, sha256 and whether each compiles."""
    doc = _run(server, config_path, as_json, lambda c: c.list_scripts())
    if kind is not None:
        doc = {**doc, "scripts": [s for s in doc["scripts"] if s["kind"] == kind]}
    if as_json:
        click.echo(json.dumps(doc, ensure_ascii=False))
        return
    if not doc["scripts"]:
        click.echo("no scripts", err=True)
    for row in doc["scripts"]:
        click.echo(f"{row['kind']}/{row['name']}  {row['sha256'][:12]}  {_compile_note(row)}")


@scripts.command("rm")
@click.argument("kind", type=_KIND)
@click.argument("name")
@service_options
def rm(kind: str, name: str, server: str | None, config_path: Path | None, as_json: bool) -> None:
    """Remove script KIND/NAME (exits 1 when there is none)."""
    _run(server, config_path, as_json, lambda c: c.delete_script(kind, name))
    path = f"{kind}/{name.removesuffix('.rhai')}"
    click.echo(json.dumps({"removed": path}) if as_json else f"removed {path}")
