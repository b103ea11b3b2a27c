"""``rhaipool validate``: which kind a script is when ``--kind`` is left out, and whole-config checks."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import tomllib
from pathlib import Path
from typing import Any

import click

from coordinator._cli.config_check import check_config_file, naming_problems
from coordinator._cli.output import EXIT_FAILED, EXIT_OK, EXIT_USAGE, fail, verbosity

__all__ = ["infer_kind", "validate_config", "validate_provider_with_config"]

_INFERENCE = re.compile(r"^\s*(?:private\s+)?fn\s+inference\s*\(", re.MULTILINE)


def infer_kind(path: Path) -> str:
    """``provider`` when the script defines ``inference``
    (the one function every provider has), else ``region``."""
    try:
        source = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return "region"
    return "provider" if _INFERENCE.search(source) else "region"


async def _check_scripts(config: Any) -> dict[str, dict[str, Any]]:
    from coordinator._cli.providers import check_provider_script
    from coordinator.providers.config import resolve_script
    from coordinator.providers.session import open_runtime

    names = sorted({name for name, _ in config.providers})
    out: dict[str, dict[str, Any]] = {}
    async with open_runtime(config) as runtime:
        for name in names:
            table = config.table(name)
            path = resolve_script(config.providers_dir, name, table.script if table else None)
            if path is None or not path.is_file():
                message = f"[model_providers.{name}] names script {path}, which does not exist"
                out[name] = {"valid": False, "error": {"class": "ProviderNotFound", "message": message}}
                continue
            out[name] = await check_provider_script(path, runtime.executor.pool)
    return out


def _service_table(path: Path) -> dict[str, Any] | None:
    """The parsed file when it is a service config (it has a ``[serve]`` table), else None."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None  # check_config_file says what is wrong with it
    return data if isinstance(data.get("serve"), dict) else None


def _validate_service_config(path: Path, data: dict[str, Any], as_json: bool) -> int:
    """A service config, checked as ``rhaipool serve`` reads it and with the files it opens at start
    (``start_problems``); its provider scripts are the tenants' (uploaded), so no script file is
    looked for."""
    from coordinator.service.config import ServiceConfigError, load_service_config
    from coordinator.service.preflight import grant_problems, start_problems

    problems = naming_problems(data, path)
    config = None
    try:
        config = load_service_config(path)
    except ServiceConfigError as exc:
        problems.append(str(exc))
    else:
        problems += start_problems(config) + grant_problems(config)
    valid = not problems
    if as_json:
        doc: dict[str, Any] = {
            "valid": valid,
            "config": str(path),
            "service": True,
            "problems": problems,
            "providers": {},
        }
        if not valid:
            doc["error"] = {"class": "InvalidConfig", "message": problems[0], "count": len(problems)}
        click.echo(json.dumps(doc, ensure_ascii=False))
    elif config is not None and valid:
        tables = sorted(name for name, _ in config.providers.providers)
        click.echo(
            f"ok: {path} (service config: listen {config.host}:{config.port}, "
            f"{len(config.tenants)} tenant(s) in the file, operator provider tables: "
            f"{', '.join(tables) or 'none'}; provider scripts are uploaded by tenants)"
        )
    else:
        for problem in problems:
            click.echo(click.style(f"error: {problem}", fg="red"), err=True)
    return EXIT_OK if valid else EXIT_FAILED


def validate_config(path: Path, as_json: bool) -> int:
    """Check the config file, every provider table and every script it names; returns the exit code.

    A service config (one with a ``[serve]`` table) is checked as ``rhaipool serve`` reads it instead.
    """
    if not path.is_file():
        fail(f"cannot read config {path}: no such file", as_json, EXIT_USAGE, "ProviderConfigError")
    service = _service_table(path)
    if service is not None:
        return _validate_service_config(path, service, as_json)
    config, problems = check_config_file(path)
    providers = asyncio.run(_check_scripts(config)) if config is not None else {}
    problems += [
        f"provider '{name}': {doc['error']['message']}" for name, doc in providers.items() if doc["error"]
    ]
    valid = not problems
    if as_json:
        doc = {"valid": valid, "config": str(path), "problems": problems, "providers": providers}
        if not valid:
            doc["error"] = {"class": "InvalidConfig", "message": problems[0], "count": len(problems)}
        click.echo(json.dumps(doc, ensure_ascii=False))
    elif valid:
        click.echo(f"ok: {path} ({len(providers)} provider(s): {', '.join(providers) or 'none'})")
    else:
        for problem in problems:
            click.echo(click.style(f"error: {problem}", fg="red"), err=True)
    return EXIT_OK if valid else EXIT_FAILED


def _table_name(config: Any, path: Path) -> str:
    """The provider ``path`` is in ``config``: the table whose script resolves to it, else its stem."""
    from coordinator.providers.config import resolve_script

    target = path.resolve()
    for name, table in config.providers:
        found = resolve_script(config.providers_dir, name, table.script)
        if found is not None and found.resolve() == target:
            return str(name)
    return path.stem


def _about(problem: str, name: str) -> bool:
    """A config problem that concerns provider ``name`` (its table) or the file as a whole."""
    return f"[model_providers.{name}" in problem or "[model_providers." not in problem


async def _initialize_with_table(config: Any, name: str, path: Path) -> dict[str, Any] | None:
    """Load ``path`` as provider ``name`` with the config's table (``initialize`` runs); the error or None."""
    from dataclasses import replace

    from coordinator._cli.provider_present import script_place
    from coordinator.providers.config import ProviderTable
    from coordinator.providers.loader import ProviderLoadError
    from coordinator.providers.session import open_runtime

    table = config.table(name) or ProviderTable(name=name)
    tables = dict(config.providers)
    tables[name] = replace(table, script=str(path.resolve()))  # noqa: ASYNC240 - the CLI command's own loop
    loader_log = logging.getLogger("coordinator.providers.loader")
    level = loader_log.level
    if verbosity() <= 0:
        loader_log.setLevel(logging.ERROR)  # the error below says it once
    async with open_runtime(replace(config, providers=tuple(tables.items()))) as runtime:
        try:
            await runtime.get(name)
        except ProviderLoadError as exc:
            place = {k: v for k, v in script_place(exc).items() if k != "file"}
            message = str(exc).removeprefix(f"compile provider script {name}: ").removeprefix(f"{name}: ")
            return {"class": "ProviderLoadError", "message": message, "file": str(path), **place}
        finally:
            loader_log.setLevel(level)
    return None


async def _check_with_table(path: Path, config: Any, name: str) -> dict[str, Any]:
    from coordinator._cli.providers import check_provider_script
    from coordinator.providers.session import open_runtime

    async with open_runtime(config) as runtime:
        doc = await check_provider_script(path, runtime.executor.pool)
    if doc["valid"]:
        doc["error"] = await _initialize_with_table(config, name, path)
        doc["valid"] = doc["error"] is None
    return doc


def validate_provider_with_config(path: Path, config_path: Path, as_json: bool) -> int:
    """``validate PATH --kind provider --config FILE``: the script, its table, and ``initialize`` with it."""
    from coordinator._cli.providers import validation_text

    if not config_path.is_file():
        fail(f"cannot read config {config_path}: no such file", as_json, EXIT_USAGE, "ProviderConfigError")
    config, problems = check_config_file(config_path)
    if config is None:
        fail(problems[-1], as_json, EXIT_USAGE, "ProviderConfigError", config=str(config_path))
    name = _table_name(config, path)
    problems = [p for p in problems if _about(p, name)]
    doc = asyncio.run(_check_with_table(path, config, name))
    doc.update(provider=name, config=str(config_path), problems=problems)
    valid = doc["valid"] and not problems
    if doc["valid"] and problems:
        doc["error"] = {"class": "InvalidConfig", "message": problems[0], "count": len(problems)}
    doc["valid"] = valid
    if as_json:
        click.echo(json.dumps(doc, ensure_ascii=False))
        return EXIT_OK if valid else EXIT_FAILED
    for problem in problems:
        click.echo(click.style(f"error: {problem}", fg="red"), err=True)
    if doc["error"] is not None and doc["error"]["class"] != "InvalidConfig":
        click.echo(click.style(validation_text(doc, path), fg="red"), err=True)
    elif valid:
        table = f"[model_providers.{name}]" if config.table(name) else f"no [model_providers.{name}] table"
        click.echo(f"{validation_text(doc, path)}; initialize ran with {table} of {config_path}")
    return EXIT_OK if valid else EXIT_FAILED
