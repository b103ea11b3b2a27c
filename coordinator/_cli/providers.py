"""Provider commands of the ``rhaipool`` CLI: ``infer``, ``models list``, ``doctor -m``, ``validate``.

``coordinator/_cli/main.py`` attaches :data:`COMMANDS` and calls :func:`run_validate` for ``--kind provider``.
Every command loads the provider the way the runtime does and runs it through a real pool
with the coordinator's real egress, so what it prints is what a host would get.

One module past 400 lines: the four commands share the loading, the error presentation and the
``--server`` switch, and splitting them apart would split those too.
"""

from __future__ import annotations

import asyncio
import json
import logging
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import click

from coordinator._cli.config_check import check_config_file
from coordinator._cli.output import EXIT_FAILED, EXIT_USAGE, emit_error, fail, verbosity
from coordinator._cli.provider_present import (
    chunk_text,
    models_text,
    provider_error_fields,
    provider_error_text,
    response_text,
    script_place,
)
from coordinator._cli.provider_watch import Watch, watching
from coordinator._cli.remote import SERVER_HELP, remote_infer, remote_models
from coordinator.providers.config import ProviderConfigError, ProvidersConfig, resolve_script
from coordinator.providers.failures import ProviderError
from coordinator.providers.loader import OPTIONAL, ProviderLoadError, ProviderNotFound
from coordinator.providers.request import InvalidProviderRequest
from coordinator.providers.response import StreamChunk
from coordinator.providers.runtime import ProviderRuntime
from coordinator.providers.session import open_runtime, read_config

__all__ = [
    "COMMANDS",
    "config_or_exit",
    "doctor_model",
    "infer_command",
    "models_command",
    "run_validate",
]

PONG_REQUEST = {"messages": [{"role": "user", "content": "Reply with exactly: PONG"}], "max_tokens": 16}


def _fail(
    message: str,
    as_json: bool,
    code: int = EXIT_FAILED,
    error: dict[str, Any] | None = None,
    cls: str = "Error",
) -> int:
    if error is not None:
        body = dict(error)
        return emit_error(body.pop("message", message), as_json, code, body.pop("class", cls), **body)
    return emit_error(message, as_json, code, cls)


def _not_found(name: str, config: ProvidersConfig, exc: ProviderNotFound) -> str:
    """Why ``name`` resolved to nothing, naming the path that was tried
    (a ``script`` override may be anywhere)."""
    if "escapes the providers directory" in str(exc):
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
        help="Config file (TOML; default ~/.rhaipool/config.toml).",
    )(fn)


def config_or_exit(
    config_path: Path | None, providers_dir: Path | None, as_json: bool = False
) -> ProvidersConfig:
    """The configuration, or exit 2 with one error saying what is wrong; unknown names are warned about."""
    if config_path is not None:
        if not config_path.is_file():
            fail(
                f"cannot read config {config_path}: no such file", as_json, EXIT_USAGE, "ProviderConfigError"
            )
        _, problems = check_config_file(config_path)
        for problem in problems if verbosity() >= 0 else []:
            if "unknown key" in problem or "passed to the script" in problem:
                click.echo(click.style(f"warning: {problem}", fg="yellow"), err=True)
    try:
        return read_config(config_path, providers_dir)
    except ProviderConfigError as exc:
        fail(str(exc), as_json, EXIT_USAGE, "ProviderConfigError")


_config = config_or_exit


def _strip_name(message: str, name: str) -> str:
    """Loader messages start with the provider's name (sometimes twice); the CLI names it once itself."""
    for prefix in (f"compile provider script {name}: ", f"{name}: "):
        while message.startswith(prefix):
            message = message[len(prefix) :]
    return message


def _load_error(name: str, runtime: ProviderRuntime, exc: ProviderLoadError, as_json: bool) -> int:
    table = runtime.config.table(name)
    path = resolve_script(runtime.config.providers_dir, name, table.script if table else None)
    place = script_place(exc)
    place["file"] = str(path) if path else place.get("file")
    where = f"{place['file']}:{place['line']}:{place.get('column', 0)}: " if place.get("line") else ""
    message = f"provider '{name}' did not load: {where}{_strip_name(str(exc), name)}"
    return _fail(message, as_json, EXIT_FAILED, {"class": "ProviderLoadError", "message": message, **place})


async def _load(runtime: ProviderRuntime, name: str, as_json: bool) -> Any:
    loader_log = logging.getLogger("coordinator.providers.loader")
    level = loader_log.level
    if verbosity() <= 0:
        loader_log.setLevel(logging.ERROR)  # the error below says it once
    try:
        return await runtime.get(name)
    except ProviderNotFound as exc:
        _fail(_not_found(name, runtime.config, exc), as_json, EXIT_USAGE, cls="ProviderNotFound")
    except ProviderLoadError as exc:
        _load_error(name, runtime, exc, as_json)
    finally:
        loader_log.setLevel(level)
    return None


def _provider_failure(exc: ProviderError, watch: Watch, as_json: bool) -> int:
    fields = provider_error_fields(exc, watch.facts, watch.host)
    if "file" in fields and watch.script is not None:
        fields["file"] = str(watch.script)
    if as_json:
        click.echo(json.dumps({"error": fields}, ensure_ascii=False))
    else:
        click.echo(click.style(f"error: {provider_error_text(fields)}", fg="red"), err=True)
    return EXIT_FAILED


async def _infer(config: ProvidersConfig, name: str, request: Any, stream: bool, as_json: bool) -> int:
    async with open_runtime(config) as runtime:
        if await _load(runtime, name, as_json) is None:
            return (
                EXIT_USAGE if runtime.config.table(name) is None and not _script_exists(runtime, name) else 1
            )
        with watching(runtime, name) as watch:
            table = runtime.config.table(name)
            watch.script = resolve_script(runtime.config.providers_dir, name, table.script if table else None)
            try:
                if stream:
                    return await _stream(runtime, name, request, as_json, watch)
                response = await runtime.inference(name, request)
            except InvalidProviderRequest as exc:
                return _fail(f"invalid request: {exc}", as_json, EXIT_USAGE, cls="RequestError")
            except ProviderError as exc:
                return _provider_failure(exc, watch, as_json)
    click.echo(json.dumps(response.to_dict(), ensure_ascii=False) if as_json else response_text(response))
    return 0


def _script_exists(runtime: ProviderRuntime, name: str) -> bool:
    table = runtime.config.table(name)
    path = resolve_script(runtime.config.providers_dir, name, table.script if table else None)
    return path is not None and path.is_file()


_EMPTY_STREAM = (
    "the stream ended with no chunk and no finish reason: the server's answer held no event the script "
    "understood (is base_url an SSE endpoint of this API?)"
)


async def _stream(runtime: ProviderRuntime, name: str, request: Any, as_json: bool, watch: Watch) -> int:
    failed = finished = False
    async for item in runtime.stream(name, request):
        if isinstance(item, StreamChunk):
            finished = finished or item.finish_reason is not None
            if as_json:
                click.echo(json.dumps(item.to_dict(), ensure_ascii=False))
            else:
                click.echo(chunk_text(item), nl=False)
        else:
            failed = True
            if not as_json:
                click.echo()
            _provider_failure(item, watch, as_json)
    if not as_json:
        click.echo()
    if not failed and not finished:
        return _fail(_EMPTY_STREAM, as_json, EXIT_FAILED, cls="InvalidResponse")
    return 1 if failed else 0


@click.command("infer")
@click.option("--provider", "name", required=True, help="Provider name (script stem or config key).")
@click.option(
    "--request",
    "request_path",
    required=True,
    type=click.Path(path_type=Path),
    help="Request file (JSON: model, system, messages, tools, max_tokens...; missing fields get defaults).",
)
@_config_options
@click.option("--stream", is_flag=True, help="Call the script's stream and print chunks as they arrive.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=None,
    help="Seconds each HTTP request may take (overrides request_timeout_secs).",
)
@click.option(
    "--retries",
    type=click.IntRange(min=0),
    default=None,
    help="Retries after a transient failure (overrides [limits] inference_retry_attempts - 1).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the answer (or one error) as JSON.")
@click.option("--server", default=None, help=SERVER_HELP)
def infer_command(
    name: str,
    request_path: Path,
    config_path: Path | None,
    providers_dir: Path | None,
    stream: bool,
    timeout: float | None,
    retries: int | None,
    as_json: bool,
    server: str | None,
) -> None:
    """Run one inference (or stream) of a provider through the pool and print the normalised answer."""
    try:
        request = json.loads(request_path.read_text(encoding="utf-8"))
    except OSError as exc:
        fail(
            f"invalid request: cannot read {request_path}: {exc.strerror or exc}", as_json, 2, "RequestError"
        )
    except ValueError as exc:  # JSONDecodeError and UnicodeDecodeError
        fail(f"invalid request: {request_path} is not JSON: {exc}", as_json, 2, "RequestError")
    if server:
        sys.exit(remote_infer(name, request, stream, as_json, server))
    config = _config(config_path, providers_dir, as_json)
    if timeout is not None:
        config = replace(config, request_timeout_secs=timeout)
    if retries is not None:
        config = replace(config, retry_attempts=retries + 1)
    sys.exit(asyncio.run(_infer(config, name, request, stream, as_json)))


async def _models(config: ProvidersConfig, name: str, as_json: bool) -> int:
    async with open_runtime(config) as runtime:
        provider = await _load(runtime, name, as_json)
        if provider is None:
            return (
                EXIT_USAGE if runtime.config.table(name) is None and not _script_exists(runtime, name) else 1
            )
        try:
            rows = await runtime.list_models(provider)
        except ProviderError as exc:
            body = {**exc.to_dict(), **script_place(exc)}
            body["message"] = f"provider '{name}' loaded but could not list its models: {exc.message}"
            return _fail(body["message"], as_json, EXIT_FAILED, body)
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
        except (ProviderLoadError, InvalidProviderRequest) as exc:
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


async def check_provider_script(path: Path, pool: Any) -> dict[str, Any]:
    """The ``validate --kind provider --json`` document: compile in a worker, check the required functions.

    ``error`` is null or ``{"class", "message", "file", "line"?, "column"?}``; ``functions`` lists the
    script's named functions (closures left out).
    """
    from coordinator.errors import LoadError
    from coordinator.providers.executor import KIND
    from coordinator.providers.loader import check_functions
    from coordinator.providers.metadata import parse_metadata

    doc: dict[str, Any] = {"valid": False, "kind": "provider", "error": None, "functions": [], "metadata": {}}
    source = path.read_text(encoding="utf-8", errors="replace")  # noqa: ASYNC240 - a CLI command's own loop
    doc["metadata"] = parse_metadata(source).to_dict()
    try:
        handle = await pool.load(source, name=str(path), kind=KIND)
    except LoadError as exc:
        place = {"file": str(path), **{k: v for k, v in script_place(exc).items() if k != "file"}}
        doc["error"] = {"class": "CompileError", "message": getattr(exc, "message", str(exc)), **place}
        return doc
    functions = [(n, a) for n, a in handle.functions if not str(n).startswith("anon$")]
    doc["functions"] = [{"name": n, "arity": a} for n, a in functions]
    problem = check_functions(path.stem, functions)
    if problem is not None:
        doc["error"] = {
            "class": "MissingFunction",
            "message": _strip_name(problem, path.stem),
            "file": str(path),
        }
        return doc
    doc["valid"] = True
    return doc


def validation_text(doc: dict[str, Any], path: Path) -> str:
    """One line for a person (the error with its place, or what the script offers)."""
    error = doc["error"]
    if error is not None:
        where = (
            f"{error['file']}:{error['line']}:{error.get('column', 0)}"
            if error.get("line")
            else error["file"]
        )
        return f"error: {where}: {error['message']}"
    present = {(f["name"], f["arity"]) for f in doc["functions"]}
    counting = "defines count_tokens" if ("count_tokens", 3) in present else "no count_tokens (heuristic)"
    optional = [fn for fn in ("stream", "count_tokens", "list_models") if (fn, OPTIONAL[fn]) in present]
    return f"ok: {path} is a valid provider script (optional: {', '.join(optional) or 'none'}; {counting})"


async def run_validate(path: Path, as_json: bool, pool: Any | None = None) -> int:
    """``rhaipool validate PATH --kind provider [--json]``; returns the exit code."""
    if pool is None:
        async with open_runtime(ProvidersConfig()) as runtime:
            return await run_validate(path, as_json, runtime.executor.pool)
    doc = await check_provider_script(path, pool)
    if as_json:
        click.echo(json.dumps(doc, ensure_ascii=False))
    else:
        text = validation_text(doc, path)
        click.echo(click.style(text, fg="red") if doc["error"] else text, err=doc["error"] is not None)
    return 0 if doc["valid"] else 1


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
