"""``rhaipool tenants list|add|rotate|revoke|purge``: the service's tenants (admin token).

``add`` and ``rotate`` make the token here, from the operating system's random source, send only its
sha256 (what the service stores) and print the token once: on stdout alone, so
``TOKEN=$(rhaipool tenants add acme)`` captures it, with what to do with it on stderr. Tenants of the
config file are changed by editing the file; the service refuses them here (409) and says why.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from coordinator._cli.errors import TenantStateError
from coordinator._cli.output import EXIT_FAILED, EXIT_USAGE, emit_error, fail
from coordinator._cli.service_access import open_client, report_refusal, service_options
from coordinator.client import Client, ServiceError

__all__ = ["new_token", "tenant_rows", "tenants"]

TOKEN_BYTES = 32
"""Random bytes in a generated token (256 bits, URL-safe base64: 43 characters)."""


def new_token() -> tuple[str, str]:
    """A fresh bearer token and its hex sha256."""
    token = secrets.token_urlsafe(TOKEN_BYTES)
    return token, hashlib.sha256(token.encode()).hexdigest()


def tenant_rows(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """``GET /api/admin/tenants``'s rows as ``{"id", "source", "revoked"}`` (a bare id: an older service)."""
    rows = []
    for item in doc.get("tenants", []):
        row = {"id": item} if isinstance(item, str) else dict(item)
        rows.append({"source": None, "revoked": False, **row})
    return rows


def _run(server: str | None, config_path: Path | None, as_json: bool, call: Callable[[Client], Any]) -> Any:
    try:
        with open_client(server, config_path, as_json, admin=True) as client:
            return call(client)
    except ServiceError as exc:
        sys.exit(report_refusal(exc, as_json))
    except TenantStateError as exc:
        sys.exit(emit_error(str(exc), as_json, EXIT_FAILED, "TenantStateError", tenant=exc.tenant))


def _find(client: Client, tenant: str) -> dict[str, Any] | None:
    return next((row for row in tenant_rows(client.list_tenants()) if row["id"] == tenant), None)


def _issue(client: Client, tenant: str, *, new: bool) -> tuple[str, str, bool]:
    """Check the tenant is (``new``: is not yet) there, then send a fresh token's hash; the token, its
    hash, and whether the tenant was revoked (a token reinstates it, with its data).

    Between the check and the PUT another admin could act: the PUT is still only "set this hash".
    """
    found = _find(client, tenant)
    if new and found is not None:
        remedy = (
            "its token is changed in the config file"
            if found["source"] == "config"
            else "`rhaipool tenants rotate` renews its token"
        )
        raise TenantStateError(tenant, f"tenant '{tenant}' exists: {remedy}")
    if not new and found is None:
        raise TenantStateError(tenant, f"no such tenant: '{tenant}' (`rhaipool tenants add` makes one)")
    token, sha = new_token()
    client.put_tenant(tenant, sha)
    return token, sha, bool(found and found["revoked"])


def _print_token(tenant: str, token: str, sha: str, as_json: bool, verb: str, **extra: Any) -> None:
    if as_json:
        click.echo(json.dumps({"tenant": tenant, "token": token, "token_sha256": sha, **extra}))
        return
    click.echo(f"tenant '{tenant}' {verb}; its token is printed once, below: store it now", err=True)
    click.echo(token)


@click.group()
def tenants() -> None:
    """The service's tenants: list, add, rotate a token, revoke, purge (admin token)."""


@tenants.command("list")
@service_options
def list_(server: str | None, config_path: Path | None, as_json: bool) -> None:
    """Every tenant: its id, where it comes from (config file or API) and whether it is revoked."""
    doc = _run(server, config_path, as_json, lambda c: c.list_tenants())
    if as_json:
        click.echo(json.dumps(doc, ensure_ascii=False))
        return
    rows = tenant_rows(doc)
    if not rows:
        click.echo("no tenants", err=True)
    for row in rows:
        click.echo(f"{row['id']}  {row['source'] or '-'}{'  revoked' if row['revoked'] else ''}")


@tenants.command("add")
@click.argument("tenant")
@service_options
def add(tenant: str, server: str | None, config_path: Path | None, as_json: bool) -> None:
    """Add TENANT with a new token, printed once (exits 1 if TENANT exists)."""
    token, sha, _ = _run(server, config_path, as_json, lambda c: _issue(c, tenant, new=True))
    _print_token(tenant, token, sha, as_json, "added")


@tenants.command("rotate")
@click.argument("tenant")
@service_options
def rotate(tenant: str, server: str | None, config_path: Path | None, as_json: bool) -> None:
    """Give TENANT a new token, printed once; the old one stops working at once.

    A revoked TENANT is reinstated by it, with the data the service kept (said so, and
    "reinstated": true with --json).
    """
    token, sha, revoked = _run(server, config_path, as_json, lambda c: _issue(c, tenant, new=False))
    verb = "is reinstated (with the data kept since its revocation) and has a new token"
    _print_token(tenant, token, sha, as_json, verb if revoked else "has a new token", reinstated=revoked)


@tenants.command("revoke")
@click.argument("tenant")
@service_options
def revoke(tenant: str, server: str | None, config_path: Path | None, as_json: bool) -> None:
    """Revoke TENANT: its token is refused and its calls stop; its data is kept until purged.

    The service keeps it for [serve] tenant_retention_days; `rhaipool tenants purge` removes it sooner.
    """
    _run(server, config_path, as_json, lambda c: c.delete_tenant(tenant))
    if as_json:
        click.echo(json.dumps({"tenant": tenant, "revoked": True}))
    else:
        click.echo(
            f"tenant '{tenant}' revoked (its data is kept: `rhaipool tenants purge {tenant}` removes it)"
        )


@tenants.command("purge")
@click.argument("tenant")
@click.option("--yes", is_flag=True, help="Do not ask (needed when stdin is not a terminal).")
@service_options
def purge(tenant: str, yes: bool, server: str | None, config_path: Path | None, as_json: bool) -> None:
    """Revoke TENANT and remove its data (scripts, regions, provider tables): this cannot be undone."""
    if not yes:
        if as_json or not sys.stdin.isatty():
            fail(
                f"purge removes every script and region of '{tenant}' for good: give --yes",
                as_json,
                EXIT_USAGE,
                "UsageError",
            )
        if not click.confirm(f"remove tenant '{tenant}' and all its data for good?"):
            sys.exit(emit_error("not purged", as_json, EXIT_FAILED, "Aborted"))
    _run(server, config_path, as_json, lambda c: c.delete_tenant(tenant, purge=True))
    if as_json:
        click.echo(json.dumps({"tenant": tenant, "purged": True}))
    else:
        click.echo(f"tenant '{tenant}' purged")
