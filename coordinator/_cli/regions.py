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
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import click

from coordinator._cli.output import EXIT_FAILED, EXIT_OK, EXIT_USAGE, error_doc, fail, verbosity
from coordinator._cli.region_present import format_result
from coordinator._cli.remote import SERVER_HELP
from coordinator._cli.remote_scenario import RemoteLoadError, run_remote_scenario
from coordinator._cli.scenario import ScenarioError, ScenarioResult, load_scenario, run_scenario
from coordinator.client import AsyncClient, ServiceError, token_from_env
from coordinator.regions.loading import (
    DEFAULT_HOOK_TIMEOUT,
    RegionLoadError,
    RegionPool,
    check_hook_arities,
    describe_failure,
)
from proto.errors import RhaipoolError

__all__ = [
    "RegionValidation",
    "run_scenarios",
    "run_test",
    "run_validate",
    "test_command",
    "validate_region",
]

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

    place: dict[str, Any] = field(default_factory=dict)
    error_class: str = "CompileError"

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: ``{"valid", "kind", "error": null | {"class", "message", "file", ...},
        "functions", "metadata"}``."""
        error = (
            None if self.error is None else {"class": self.error_class, "message": self.error, **self.place}
        )
        return {
            "valid": self.valid,
            "kind": "region",
            "error": error,
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
    """Compile ``path`` in a sandboxed worker and check the hooks' arities (no hook is called)."""
    label = str(path)
    place: dict[str, Any] = {"file": label}
    try:
        source = await asyncio.to_thread(path.read_text, encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        return RegionValidation(
            False, f"cannot read custom region script '{label}': {exc}", place=place, error_class="InputError"
        )
    try:
        handle = await pool.load(source, name=label, kind="region")
    except RhaipoolError as exc:
        inner = describe_failure(exc).split(": ", 1)[-1]
        line, column = getattr(exc, "line", None), getattr(exc, "column", None)
        place.update({"line": line, "column": column or 0} if line else {})
        return RegionValidation(False, f"Script compilation failed: {label}: {inner}", place=place)
    functions = [
        (str(n), int(a)) for n, a in getattr(handle, "functions", ()) if not str(n).startswith("anon$")
    ]
    problem = check_hook_arities(functions)
    if problem is not None:
        message = f"Script validation failed: {label}: {problem}"
        return RegionValidation(False, message, functions, place=place, error_class="MissingFunction")
    return RegionValidation(True, None, functions)


def _style(color: bool) -> Callable[[str, str], str]:
    colors = {"warn": "yellow", "error": "red", "head": None, "dim": None}

    def style(text: str, role: str) -> str:
        if not color:
            return text
        return click.style(text, fg=colors.get(role), bold=role == "head", dim=role == "dim")

    return style


def scenario_paths(given: tuple[Path, ...]) -> list[Path]:
    """Each SCENARIO as given; a directory stands for its ``*.scenario.json`` files, sorted."""
    out: list[Path] = []
    for path in given:
        out.extend(sorted(path.glob("*.scenario.json")) if path.is_dir() else [path])
    return out


async def _run_one(
    path: Path, as_json: bool, hook_timeout: float, pool_factory: PoolFactory
) -> tuple[int, dict[str, Any]]:
    try:
        scenario = load_scenario(path)
    except ScenarioError as exc:
        return EXIT_USAGE, error_doc("ScenarioError", f"invalid scenario: {exc}", file=str(path))
    try:
        async with pool_factory() as pool:
            result = await run_scenario(scenario, pool, hook_timeout=hook_timeout)
    except RegionLoadError as exc:
        return EXIT_FAILED, error_doc("RegionLoadError", str(exc), file=str(scenario.script))
    return _finish(path, result, as_json)


async def _remote_one(path: Path, as_json: bool, server: str) -> tuple[int, dict[str, Any]]:
    """``--server``: the same run against a running service (``remote_scenario.py``)."""
    try:
        scenario = load_scenario(path)
    except ScenarioError as exc:
        return EXIT_USAGE, error_doc("ScenarioError", f"invalid scenario: {exc}", file=str(path))
    try:
        async with AsyncClient(server, token_from_env()) as client:
            result = await run_remote_scenario(scenario, client)
    except RemoteLoadError as exc:
        return EXIT_FAILED, error_doc("RegionLoadError", str(exc), file=str(scenario.script))
    except ServiceError as exc:
        return EXIT_FAILED, error_doc("ServiceError", exc.message, status=exc.status)
    return _finish(path, result, as_json)


def _finish(path: Path, result: ScenarioResult, as_json: bool) -> tuple[int, dict[str, Any]]:
    if not as_json:
        click.echo(format_result(result, _style(sys.stdout.isatty()), verbose=verbosity() > 0))
    return (EXIT_OK if result.passed else EXIT_FAILED), {"scenario": str(path), **result.to_json()}


RunOne = Callable[[Path, bool], Awaitable[tuple[int, dict[str, Any]]]]
"""Runs one scenario file (printing it unless ``--json``): its exit code and its ``--json`` document."""


async def _run_test(paths: list[Path], as_json: bool, hook_timeout: float, pool_factory: PoolFactory) -> int:
    return await run_scenarios(paths, as_json, lambda p, j: _run_one(p, j, hook_timeout, pool_factory))


async def run_scenarios(paths: list[Path], as_json: bool, run_one: RunOne) -> int:
    """Run each scenario, print the ``--json`` document or the summary; the worst exit code."""
    codes, docs = [], []
    for path in paths:
        code, doc = await run_one(path, as_json)
        codes.append(code)
        docs.append(doc)
        if "error" in doc and not as_json:
            click.echo(click.style(f"error: {doc['error']['message']}", fg="red"), err=True)
    if as_json:
        out: Any = docs[0] if len(docs) == 1 else {"scenarios": docs, "passed": all(c == 0 for c in codes)}
        click.echo(json.dumps(out, ensure_ascii=False, indent=2))
    elif len(paths) > 1:
        passed = sum(1 for c in codes if c == 0)
        click.echo(f"{passed} of {len(paths)} scenario(s) passed")
    return max(codes, default=EXIT_OK)


def _positive_seconds(ctx: click.Context, param: click.Parameter, value: float) -> float:
    """A hook deadline must be a finite positive number: 0, negative or NaN would fail every hook."""
    if not (math.isfinite(value) and value > 0):
        raise click.BadParameter(f"{value} is not a positive number of seconds", ctx, param)
    return value


@click.command("test")
@click.argument("scenarios", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--json", "as_json", is_flag=True, help="Print the run as JSON (steps, entries, passed, failures)."
)
@click.option(
    "--timeout",
    type=float,
    default=DEFAULT_HOOK_TIMEOUT,
    show_default=True,
    callback=_positive_seconds,
    help="Seconds each hook may run.",
)
@click.option("--server", default=None, help=SERVER_HELP + " The service's hook deadline applies.")
def test_command(scenarios: tuple[Path, ...], as_json: bool, timeout: float, server: str | None) -> None:
    """Replay each scenario against its custom region and show what the model would see.

    A SCENARIO may be a directory (its *.scenario.json files). Exits 1 when an expectation a
    scenario states does not hold, 2 when a scenario file is not valid.
    """
    paths = scenario_paths(scenarios)
    if not paths:
        fail("no *.scenario.json file in the given directories", as_json, EXIT_USAGE, "UsageError")
    if server:
        sys.exit(asyncio.run(run_scenarios(paths, as_json, partial(_remote_one, server=server))))
    sys.exit(asyncio.run(_run_test(paths, as_json, timeout, _default_pool)))


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
    return asyncio.run(_run_test([path], as_json, hook_timeout, _default_pool))


def run_validate(path: Path, as_json: bool, pool_factory: PoolFactory = _default_pool) -> int:
    """``rhaipool validate PATH --kind region [--json]``: prints the result, returns the exit code."""
    return asyncio.run(_validate(path, as_json, pool_factory))
