"""Provider commands of the ``rhaipool`` CLI: ``infer``, ``models list``, ``doctor -m``, ``validate``.

``coordinator/_cli/main.py`` attaches :data:`COMMANDS` and calls :func:`run_validate` for ``--kind provider``.
Every command loads the provider the way the runtime does (§3.1–§3.4) and runs it through a real pool
with the coordinator's real egress, so what it prints is what a host would get.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import click

from coordinator.providers.config import ProviderConfigError, ProvidersConfig, resolve_script
from coordinator.providers.failures import ProviderError
from coordinator.providers.loader import ProviderLoadError, ProviderNotFound
from coordinator._cli.remote import SERVER_HELP, remote_infer, remote_models
from coordinator._cli.provider_present import chunk_text, models_text, response_text
from coordinator.providers.request import RequestError
from coordinator.providers.response import StreamChunk
from coordinator.providers.runtime import ProviderRuntime
from coordinator.providers.session import open_runtime, read_config, validate_provider

__all__ = ["COMMANDS", "doctor_model", "infer_command", "models_command", "run_validate"]

PONG_REQUEST = {"messages": [{"role": "user", "content": "Reply with exactly: PONG"}], "max_tokens": 16}


def _fail(message: str, as_json: bool, code: int = 1, error: dict[str, Any] | None = None) -> int:
    if as_json:
        click.echo(json.dumps({"error": error or {"class": "Other", "message": message, "transient": False}}))
    else:
        click.echo(click.style(f"error: {message}", fg="red"), err=True)
    return code


def _not_found(name: str, config: ProvidersConfig, exc: ProviderNotFound) -> str:
    """Why ``name`` resolved to nothing, naming the path that was tried (a ``script`` override may be anywhere)."""
    if "escapes the providers directory" in str(exc):  # the loader already logged the §3.1 warning
        return (
            f"no provider named '{name}': its script path escapes the providers directory - refusing to load"
        )
    table = config.table(name)
    path = resolve_script(config.providers_dir, name, table.script if table else None)
    if table is None:
        return f"no provider named '{name}': no script {path} and no [model_providers.{name}] table"
    return f"no provider named '{name}': [model_providers.{name}] resolves to {path}, which does not exist"


def _config_options(fn: Any) -> Any:
    fn = click.option(
        "--providers-dir",
        type=click.Path(file_okay=False, path_type=Path),
        help="Directory of provider scripts (overrides the config's providers_dir).",
    )(fn)
    return click.option(
        "--config",
        "config_path",
        type=click.Path(path_type=Path),
        help="Config TOML (default ~/.rhaipool/config.toml).",
    )(fn)


def _config(config_path: Path | None, providers_dir: Path | None, as_json: bool = False) -> ProvidersConfig:
    """The configuration, or exit 1 with one line (``{"error": ...}`` with ``--json``) saying what is wrong.

    ``--config`` is not checked by click, so a missing file gets the same treatment as a broken one.
    """
    try:
        return read_config(config_path, providers_dir)
    except ProviderConfigError as exc:
        sys.exit(_fail(str(exc), as_json))


async def _load(runtime: ProviderRuntime, name: str, as_json: bool) -> Any:
    try:
        return await runtime.get(name)
    except ProviderNotFound as exc:
        _fail(_not_found(name, runtime.config, exc), as_json)
    except ProviderLoadError as exc:
        _fail(f"provider '{name}' did not load: {exc}", as_json)
    return None


async def _infer(config: ProvidersConfig, name: str, request: Any, stream: bool, as_json: bool) -> int:
    async with open_runtime(config) as runtime:
        if await _load(runtime, name, as_json) is None:
            return 1
        try:
            if stream:
                return await _stream(runtime, name, request, as_json)
            response = await runtime.inference(name, request)
        except RequestError as exc:
            return _fail(f"invalid request: {exc}", as_json, 2)
        except ProviderError as exc:
            return _fail(f"{exc.class_name}: {exc.message}", as_json, 1, exc.to_dict())
    click.echo(json.dumps(response.to_dict(), ensure_ascii=False) if as_json else response_text(response))
    return 0


async def _stream(runtime: ProviderRuntime, name: str, request: Any, as_json: bool) -> int:
    failed = False
    async for item in runtime.stream(name, request):
        if isinstance(item, StreamChunk):
            if as_json:
                click.echo(json.dumps(item.to_dict(), ensure_ascii=False))
            else:
                click.echo(chunk_text(item), nl=False)
        else:
            failed = True
            if as_json:
                click.echo(json.dumps({"error": item.to_dict()}))
            else:
                click.echo(click.style(f"\nerror: {item.class_name}: {item.message}", fg="red"), err=True)
    if not as_json:
        click.echo()
    return 1 if failed else 0


@click.command("infer")
@click.option("--provider", "name", required=True, help="Provider name (script stem or config key).")
@click.option(
    "--request",
    "request_path",
    required=True,
    type=click.Path(path_type=Path),
    help="Request JSON (SPEC §3.6; missing fields get their defaults).",
)
@_config_options
@click.option("--stream", is_flag=True, help="Call the script's stream and print chunks as they arrive.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--server", default=None, help=SERVER_HELP)
def infer_command(
    name: str,
    request_path: Path,
    config_path: Path | None,
    providers_dir: Path | None,
    stream: bool,
    as_json: bool,
    server: str | None,
) -> None:
    """Run one inference (or stream) of a provider through the pool and print the normalised answer."""
    try:
        request = json.loads(request_path.read_text(encoding="utf-8"))
    except OSError as exc:
        sys.exit(_fail(f"invalid request: cannot read {request_path}: {exc.strerror or exc}", as_json, 2))
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        sys.exit(_fail(f"invalid request: {request_path} is not JSON: {exc}", as_json, 2))
    if server:
        sys.exit(remote_infer(name, request, stream, as_json, server))
    config = _config(config_path, providers_dir, as_json)
    sys.exit(asyncio.run(_infer(config, name, request, stream, as_json)))


async def _models(config: ProvidersConfig, name: str, as_json: bool) -> int:
    async with open_runtime(config) as runtime:
        provider = await _load(runtime, name, as_json)
        if provider is None:
            return 1
        try:
            rows = await runtime.list_models(provider)
        except ProviderError as exc:
            return _fail(f"provider '{name}' loaded but could not list its models: {exc.message}", as_json)
    if as_json:
        click.echo(json.dumps({"provider": name, "models": [r.to_dict() for r in rows]}, ensure_ascii=False))
    elif not rows:
        why = (
            "it defines no list_models"
            if not provider.has("list_models")
            else "its list_models returned none"
        )
        serves = provider.table.serves if provider.table else None
        hint = (
            f"its config's `serves` names {', '.join(serves)}, which is not a listing"
            if serves
            else "`serves` in its config table can name the models it takes"
        )
        click.echo(f"provider '{name}' loaded and listed no models ({why}; {hint})")
    else:
        click.echo(models_text(name, rows))
    return 0


@click.group("models")
def models_command() -> None:
    """Models that providers say they serve."""


@models_command.command("list")
@click.option("--provider", "name", required=True, help="Provider name (script stem or config key).")
@_config_options
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--server", default=None, help=SERVER_HELP)
def models_list(
    name: str, config_path: Path | None, providers_dir: Path | None, as_json: bool, server: str | None
) -> None:
    """Load a provider (compile + initialize) and print what its list_models answers."""
    if server:
        sys.exit(remote_models(name, as_json, server))
    sys.exit(asyncio.run(_models(_config(config_path, providers_dir, as_json), name, as_json)))


async def doctor_model(config: ProvidersConfig, target: str) -> dict[str, Any]:
    """``doctor -m PROVIDER/MODEL``: load the provider and run one real inference asking for PONG."""
    name, _, model = target.partition("/")
    report: dict[str, Any] = {"provider": name, "model": model or None, "ok": False}
    async with open_runtime(config) as runtime:
        try:
            provider = await runtime.get(name)
            report["loaded"] = True
            request = {**PONG_REQUEST, **({"model": model} if model else {})}
            response = await runtime.inference(provider.name, request)
        except ProviderNotFound as exc:
            report["error"] = _not_found(name, config, exc)
        except (ProviderLoadError, RequestError) as exc:
            report["error"] = str(exc)
        except ProviderError as exc:
            report["error"] = f"{exc.class_name}: {exc.message}"
        else:
            report.update(
                ok="PONG" in response.content,
                reply=response.content,
                tokens=response.tokens_used.total_tokens,
            )
    return report


async def run_validate(path: Path, as_json: bool, pool: Any | None = None) -> int:
    """``rhaipool validate PATH --kind provider [--json]``; returns the exit code."""
    if pool is None:
        async with open_runtime(ProvidersConfig()) as runtime:
            return await run_validate(path, as_json, runtime.executor.pool)
    result = await validate_provider(path, pool)
    if as_json:
        click.echo(json.dumps(result.to_json(), ensure_ascii=False))
    else:
        click.echo(result.describe(path), err=not result.valid)
    return 0 if result.valid else 1


@click.command("doctor-model", hidden=True)
@click.option("-m", "target", required=True, help="PROVIDER/MODEL")
@_config_options
@click.option("--json", "as_json", is_flag=True)
def doctor_model_command(
    target: str, config_path: Path | None, providers_dir: Path | None, as_json: bool
) -> None:
    """The provider half of ``rhaipool doctor -m``."""
    report = asyncio.run(doctor_model(_config(config_path, providers_dir), target))
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False))
    else:
        state = "ok" if report["ok"] else "FAILED"
        click.echo(f"inference {target}: {state} - {report.get('reply') or report.get('error')}")
    sys.exit(0 if report["ok"] else 1)


COMMANDS = (infer_command, models_command)
