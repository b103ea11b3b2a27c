"""``--server URL``: the script-running commands against a running ``rhaipool serve`` instead of a local pool.

The token comes from ``$RHAIPOOL_TOKEN`` (never a command-line argument, which ``ps`` would show).
Output keeps each command's local shape, so a script reading ``--json`` works either way.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from coordinator._cli.provider_present import provider_error_text
from coordinator._cli.remote_present import remote_failure_fields
from coordinator.client import Client, ServiceError, token_from_env

#: The classes of a provider failure (``rhaipool infer --json``); other errors are the service's own.
PROVIDER_CLASSES = frozenset(
    {
        "RateLimitExceeded",
        "RequestFailed",
        "ApiError",
        "Unavailable",
        "InvalidResponse",
        "TokenLimitExceeded",
        "Other",
    }
)

__all__ = ["SERVER_HELP", "remote_doctor", "remote_infer", "remote_models", "remote_validate"]

SERVER_HELP = "Run against a running `rhaipool serve` at URL (token from $RHAIPOOL_TOKEN)."


def _client(server: str) -> Client:
    return Client(server, token_from_env())


def _error(exc: ServiceError, as_json: bool) -> int:
    error = (
        exc.error
        if isinstance(exc.error, dict)
        else {"class": "Other", "message": exc.message, "transient": exc.status in (0, 503)}
    )
    if as_json:
        click.echo(json.dumps({"error": error}, ensure_ascii=False))
    else:
        click.echo(click.style(f"error: {error.get('message', exc.message)}", fg="red"), err=True)
    return 1


def _provider_error(error: dict[str, Any], as_json: bool) -> int:
    """A provider failure the service answered, shown as ``rhaipool infer`` shows a local one."""
    fields = remote_failure_fields(error, None)
    if as_json:
        click.echo(json.dumps({"error": fields}, ensure_ascii=False))
    else:
        click.echo(click.style(f"error: {provider_error_text(fields)}", fg="red"), err=True)
    return 1


def _is_provider_failure(exc: ServiceError) -> bool:
    """The provider failed (the service's own refusals, such as an unknown name, are ``Other`` too)."""
    cls = exc.error.get("class") if isinstance(exc.error, dict) else None
    return cls in PROVIDER_CLASSES and (cls != "Other" or exc.status == 502)


def remote_validate(path: Path, kind: str, as_json: bool, server: str) -> int:
    """``validate PATH --kind region|provider --server URL``."""
    from coordinator.providers.metadata import parse_metadata

    try:
        content = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return _error(ServiceError(400, f"cannot read {path}: {exc}"), as_json)
    try:
        with _client(server) as client:
            verdict = client.validate("region_hook" if kind == "region" else "provider", content)
    except ServiceError as exc:
        return _error(exc, as_json)
    metadata = parse_metadata(content).to_dict() if kind == "provider" else {}
    if as_json:
        out = {
            "valid": verdict["valid"],
            "error": verdict.get("error"),
            "functions": [],
            "metadata": metadata,
        }
        click.echo(json.dumps(out, ensure_ascii=False))
    elif verdict["valid"]:
        click.echo(f"ok: {path} is a valid {kind} script")
    else:
        click.echo(f"error: {verdict.get('error')}", err=True)
    return 0 if verdict["valid"] else 1


def _chunk_line(item: dict[str, Any]) -> str:
    return str(item.get("delta") or "")


def remote_infer(name: str, request: Any, stream: bool, as_json: bool, server: str) -> int:
    """``infer --provider NAME --request REQ.json --server URL [--stream] [--json]``."""
    try:
        with _client(server) as client:
            if not stream:
                answer = client.inference(name, request)
                click.echo(json.dumps(answer, ensure_ascii=False) if as_json else answer["content"])
                return 0
            failed = False
            for item in client.stream(name, request):
                if "error" in item:
                    failed = True
                    if not as_json:
                        click.echo()
                    _provider_error(item["error"], as_json)
                elif as_json:
                    click.echo(json.dumps(item, ensure_ascii=False))
                else:
                    click.echo(_chunk_line(item), nl=False)
            if not as_json and not failed:
                click.echo()
            return 1 if failed else 0
    except ServiceError as exc:
        if _is_provider_failure(exc):
            assert isinstance(exc.error, dict)
            return _provider_error(exc.error, as_json)
        return _error(exc, as_json)


def remote_models(name: str, as_json: bool, server: str) -> int:
    """``models list --provider NAME --server URL``."""
    try:
        with _client(server) as client:
            listing = client.list_models(name)
    except ServiceError as exc:
        return _error(exc, as_json)
    if as_json:
        click.echo(json.dumps(listing, ensure_ascii=False))
    elif not listing["models"]:
        click.echo(f"provider '{name}' loaded and listed no models")
    else:
        for row in listing["models"]:
            click.echo(f"{name}/{row.get('id')}")
    return 0


def _service_workers(server: str, client: Client) -> tuple[list[dict[str, Any]] | None, bool]:
    """The service's workers and whether it can run calls.

    A tenant's token is not shown the workers (their pids and memory are the operator's): with
    ``$RHAIPOOL_ADMIN_TOKEN`` set they are read with it, else the service's readiness stands for them.
    """
    admin = token_from_env(admin=True)
    if admin and admin != token_from_env():
        with Client(server, admin) as operator:
            status = operator.status()
    else:
        status = client.status()
    workers = status.get("workers")
    if workers is not None:
        return workers, bool(workers)
    try:
        client.readyz()
    except ServiceError as exc:
        if exc.status != 503:
            raise
        return None, False
    return None, True


def remote_doctor(server: str, target: str | None, as_json: bool) -> int:
    """``doctor --server URL [-m PROVIDER/MODEL]``:
    the service's workers and sandbox layers, one inference."""
    try:
        with _client(server) as client:
            workers, ready = _service_workers(server, client)
            report: dict[str, Any] = {"workers": workers or [], "ok": ready}
            if target:
                name, _, model = target.partition("/")
                ask = {
                    "messages": [{"role": "user", "content": "Reply with exactly: PONG"}],
                    "max_tokens": 16,
                }
                try:
                    answer = client.inference(name, {**ask, **({"model": model} if model else {})})
                    report["inference"] = {
                        "provider": name,
                        "ok": "PONG" in answer["content"],
                        "reply": answer["content"],
                    }
                except ServiceError as exc:
                    report["inference"] = {"provider": name, "ok": False, "error": exc.message}
                report["ok"] = report["ok"] and report["inference"]["ok"]
    except ServiceError as exc:
        return _error(exc, as_json)
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False))
    else:
        if workers is None:
            click.echo(
                f"service {'ready' if ready else 'NOT ready'} (its workers are shown to the admin token: "
                "set $RHAIPOOL_ADMIN_TOKEN to see them)"
            )
        for w in report["workers"]:
            click.echo(f"worker {w['id']} (pid {w['pid']}, {w['state']}): sandbox {', '.join(w['sandbox'])}")
        if target:
            inf = report["inference"]
            click.echo(
                f"inference {target}: {'ok' if inf['ok'] else 'FAILED'}"
                f" - {inf.get('reply') or inf.get('error')}"
            )
    return 0 if report["ok"] else 1
