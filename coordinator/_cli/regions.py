"""Region commands for the ``rhaipool`` CLI: ``test SCENARIO.json`` and ``validate --kind region``.

``coordinator/_cli/main.py`` attaches ``test_command`` and calls ``validate_region``
for ``--kind region``; both go through a real pool, so what they report is
what a host would get.
"""

from __future__ import annotations

import asyncio
import json
import math
import sys
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from coordinator.regions.loading import (
    DEFAULT_HOOK_TIMEOUT,
    RegionLoadError,
    RegionPool,
    check_hook_arities,
    describe_failure,
)
from coordinator._cli.region_present import format_result
from coordinator._cli.scenario import ScenarioError, load_scenario, run_scenario
from proto.errors import RhaipoolError

__all__ = ["RegionValidation", "run_test", "run_validate", "test_command", "validate_region"]

PoolFactory = Callable[[], AbstractAsyncContextManager[RegionPool]]


@asynccontextmanager
async def _default_pool() -> AsyncIterator[RegionPool]:
    from coordinator._core.pool import Pool  # the CLI only; the library takes any pool

    async with Pool() as pool:
        yield pool


@dataclass(frozen=True, slots=True)
class RegionValidation:
    """The ``--json`` document of ``validate --kind region``."""

    valid: bool
    error: str | None
    functions: list[tuple[str, int]] = field(default_factory=list)
    metadata: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """``{"valid", "error", "functions": [{"name", "arity"}], "metadata": {}}``."""
        return {
            "valid": self.valid,
            "error": self.error,
            "functions": [{"name": n, "arity": a} for n, a in self.functions],
            "metadata": dict(self.metadata),
        }

    def describe(self, path: Path) -> str:
        """One line for a person."""
        if not self.valid:
            return f"error: {self.error}"
        listed = ", ".join(f"{n}/{a}" for n, a in self.functions)
        return f"ok: {path} is a valid region script ({listed})"


async def validate_region(path: Path, pool: RegionPool) -> RegionValidation:
    """Compile ``path`` in a sandboxed worker and run the §1.2 checks (no hook is called)."""
    label = str(path)
    try:
        source = await asyncio.to_thread(path.read_text, encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return RegionValidation(False, f"cannot read custom region script '{label}': {exc}")
    try:
        handle = await pool.load(source, name=label, kind="region")
    except RhaipoolError as exc:
        inner = describe_failure(exc).split(": ", 1)[-1]
        return RegionValidation(False, f"Script compilation failed: {label}: {inner}")
    functions = [(str(n), int(a)) for n, a in getattr(handle, "functions", ())]
    problem = check_hook_arities(functions)
    if problem is not None:
        return RegionValidation(False, f"Script validation failed: {label}: {problem}", functions)
    return RegionValidation(True, None, functions)


def _style(color: bool) -> Callable[[str, str], str]:
    colors = {"warn": "yellow", "error": "red", "head": None, "dim": None}

    def style(text: str, role: str) -> str:
        if not color:
            return text
        return click.style(text, fg=colors.get(role), bold=role == "head", dim=role == "dim")

    return style


async def _run_test(path: Path, as_json: bool, hook_timeout: float, pool_factory: PoolFactory) -> int:
    try:
        scenario = load_scenario(path)
    except ScenarioError as exc:
        _emit_error(f"invalid scenario: {exc}", as_json)
        return 2
    try:
        async with pool_factory() as pool:
            result = await run_scenario(scenario, pool, hook_timeout=hook_timeout)
    except RegionLoadError as exc:
        _emit_error(str(exc), as_json)
        return 1
    if as_json:
        click.echo(json.dumps(result.to_json(), ensure_ascii=False, indent=2))
    else:
        click.echo(format_result(result, _style(sys.stdout.isatty())))
    return 0


def _emit_error(message: str, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"error": message}, ensure_ascii=False))
    else:
        click.echo(click.style(f"error: {message}", fg="red"), err=True)


def _positive_seconds(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """A hook deadline must be a finite positive number: 0, negative or NaN would fail every hook."""
    if not (math.isfinite(value) and value > 0):
        raise click.BadParameter(f"{value} is not a positive number of seconds", ctx, param)
    return value


@click.command("test")
@click.argument("scenario", type=click.Path(path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the §4.1 JSON document instead of a summary.")
@click.option(
    "--timeout",
    type=float,
    default=DEFAULT_HOOK_TIMEOUT,
    show_default=True,
    callback=_positive_seconds,
    help="Seconds each hook may run.",
)
def test_command(scenario: Path, as_json: bool, timeout: float) -> None:
    """Replay SCENARIO against one custom region through the real pool and show what the model would see.

    SCENARIO is not checked by click, so a missing file is reported like any other unreadable scenario
    (as JSON with ``--json``, exit 2).
    """
    sys.exit(asyncio.run(_run_test(scenario, as_json, timeout, _default_pool)))


async def _validate(path: Path, as_json: bool, pool_factory: PoolFactory) -> int:
    async with pool_factory() as pool:
        result = await validate_region(path, pool)
    if as_json:
        click.echo(json.dumps(result.to_json(), ensure_ascii=False))
    elif result.valid:
        click.echo(result.describe(path))
    else:
        click.echo(click.style(result.describe(path), fg="red"), err=True)
    return 0 if result.valid else 1


def run_test(path: Path, as_json: bool, hook_timeout: float = DEFAULT_HOOK_TIMEOUT) -> int:
    """``rhaipool test SCENARIO`` without exiting: prints the result, returns the exit code."""
    return asyncio.run(_run_test(path, as_json, hook_timeout, _default_pool))


def run_validate(path: Path, as_json: bool, pool_factory: PoolFactory = _default_pool) -> int:
    """``rhaipool validate PATH --kind region [--json]``: prints the result, returns the exit code."""
    return asyncio.run(_validate(path, as_json, pool_factory))
