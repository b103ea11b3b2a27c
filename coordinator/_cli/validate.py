"""``rhaipool validate``: which kind a script is when ``--kind`` is left out, and whole-config checks."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import click

from coordinator._cli.config_check import check_config_file
from coordinator._cli.output import EXIT_FAILED, EXIT_OK, EXIT_USAGE, fail

__all__ = ["infer_kind", "validate_config"]

_INFERENCE = re.compile(r"^\s*(?:private\s+)?fn\s+inference\s*\(", re.MULTILINE)


def infer_kind(path: Path) -> str:
    """``provider`` when the script defines ``inference`` (the one function every provider has), else ``region``."""
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


def validate_config(path: Path, as_json: bool) -> int:
    """Check the config file, every provider table and every script it names; returns the exit code."""
    if not path.is_file():
        fail(f"cannot read config {path}: no such file", as_json, EXIT_USAGE, "ProviderConfigError")
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
