"""The ``rhaipool`` command line.

Sub-commands live next to the runtime they drive (``coordinator._cli.regions``,
``coordinator._cli.providers``, ``coordinator.bench``); this module only attaches
them and holds the two commands that span both kinds: ``validate`` and ``doctor``.
Exit codes and the ``--json`` error shape are the same everywhere (``coordinator._cli.output``).
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from typing import Any

import click

from coordinator import __version__
from coordinator._cli import providers as provider_cli
from coordinator._cli import regions as region_cli
from coordinator._cli import serve as serve_cli
from coordinator._cli.keys import keys as keys_group
from coordinator._cli.node import node as node_command
from coordinator._cli.output import (
    CONTEXT_SETTINGS,
    EXIT_USAGE,
    RhaipoolGroup,
    add_verbosity,
    fail,
)
from coordinator._cli.remote import SERVER_HELP, remote_doctor, remote_validate
from coordinator._cli.scripts import scripts as scripts_group
from coordinator._cli.status import status_command
from coordinator._cli.tenants import tenants as tenants_group
from coordinator._cli.validate import infer_kind, validate_config, validate_provider_with_config
from coordinator.bench.pool import bench as pool_bench

_PASSTHROUGH = {"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": []}


@click.group(cls=RhaipoolGroup, context_settings=CONTEXT_SETTINGS)
@click.version_option(__version__, prog_name="rhaipool")
def main() -> None:
    """Run untrusted Rhai region and provider scripts in sandboxed workers."""


@main.command()
@click.argument("path", type=click.Path(path_type=Path), required=False)
@click.option(
    "--kind",
    type=click.Choice(["region", "provider"]),
    default=None,
    help="What PATH is; when left out, a script defining inference is a provider, else a region.",
)
@click.option(
    "--config",
    "config_path",
    type=click.Path(path_type=Path),
    help="Config file (TOML): with a provider PATH, check its table and run initialize with it; "
    "without PATH, check the whole file and every provider script it names.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document (see the CLI reference).")
@click.option("--server", default=None, help=SERVER_HELP)
def validate(
    path: Path | None, kind: str | None, config_path: Path | None, as_json: bool, server: str | None
) -> None:
    """Compile PATH in a sandboxed worker and check the functions its kind requires.

    With --config FILE and no PATH, check the whole config file instead.
    """
    if path is None:
        if config_path is None:
            fail(
                "give a script PATH, or --config FILE to check a config file",
                as_json,
                EXIT_USAGE,
                "UsageError",
            )
        sys.exit(validate_config(config_path, as_json))
    if not path.is_file():
        fail(f"cannot read {path}: no such file", as_json, EXIT_USAGE, "InputError")
    kind = kind or infer_kind(path)
    if server:
        sys.exit(remote_validate(path, kind, as_json, server))
    if kind == "provider" and config_path is not None:
        sys.exit(validate_provider_with_config(path, config_path, as_json))
    if kind == "region":
        sys.exit(region_cli.run_validate(path, as_json))
    sys.exit(asyncio.run(provider_cli.run_validate(path, as_json)))


main.add_command(region_cli.test_command)
for command in provider_cli.COMMANDS:
    main.add_command(command)
main.add_command(keys_group)
main.add_command(node_command)
main.add_command(serve_cli.serve_command)
main.add_command(status_command)  # coordinator._cli.status: --server or --config, like scripts and tenants
main.add_command(scripts_group)
main.add_command(tenants_group)


async def _sandbox_report() -> list[dict[str, Any]]:
    from coordinator import Pool, PoolConfig

    async with Pool(PoolConfig(workers=1, spares=0)) as pool:
        handle = await pool.load("fn ping() { true }", name="doctor.rhai", kind="region")
        healthy = await pool.call(handle, "ping", timeout=5.0) is True
        return [
            {"worker": w.id, "pid": w.pid, "healthy": healthy, "sandbox": w.sandbox} for w in pool.workers()
        ]


def _doctor_text(report: dict[str, Any], target: str | None) -> None:
    for w in report["workers"]:
        click.echo(f"worker {w['worker']} (pid {w['pid']}): {'healthy' if w['healthy'] else 'NOT healthy'}")
        for layer, info in w["sandbox"].items():
            if isinstance(info, dict) and "active" in info:
                mark = "active  " if info["active"] else "INACTIVE"
                click.echo(f"  {layer:<13} {mark} {info.get('detail', '')}")
    if target:
        inf = report["inference"]
        click.echo(
            f"inference {target}: {'ok' if inf['ok'] else 'FAILED'} - {inf.get('reply') or inf.get('error')}"
        )


@main.command()
@click.option("-m", "target", metavar="PROVIDER/MODEL", help="Also run one real inference on PROVIDER/MODEL.")
@click.option("--config", "config_path", type=click.Path(path_type=Path), help="Config file (TOML).")
@click.option(
    "--providers-dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Directory of provider scripts (overrides the config's providers_dir).",
)
@click.option("--json", "as_json", is_flag=True, help='Print {"workers", "ok", "inference"?}.')
@click.option("--server", default=None, help=SERVER_HELP)
def doctor(
    target: str | None,
    config_path: Path | None,
    providers_dir: Path | None,
    as_json: bool,
    server: str | None,
) -> None:
    """Report every sandbox layer of a real worker, the pool's health and, with -m, one inference."""
    if target is not None and (target.count("/") < 1 or not all(target.partition("/")[::2])):
        fail(
            f"-m takes PROVIDER/MODEL (for example groq/llama-3.3-70b), not {target!r}",
            as_json,
            EXIT_USAGE,
            "UsageError",
        )
    config = (
        provider_cli.config_or_exit(config_path, providers_dir, as_json)
        if (config_path or providers_dir or target)
        else None
    )
    if server:
        sys.exit(remote_doctor(server, target, as_json))
    workers = asyncio.run(_sandbox_report())
    report: dict[str, Any] = {"workers": workers, "ok": all(w["healthy"] for w in workers)}
    if target and config is not None:
        report["inference"] = asyncio.run(provider_cli.doctor_model(config, target))
        report["ok"] = report["ok"] and report["inference"]["ok"]
    if as_json:
        click.echo(json.dumps(report, ensure_ascii=False))
    else:
        _doctor_text(report, target)
    sys.exit(0 if report["ok"] else 1)


@main.command()
@click.option(
    "--scenario",
    type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None,
    help="Region scenario to replay (default: the shipped brain scenario).",
)
def demo(scenario: Path | None) -> None:
    """Replay a region scenario and ask a provider, both through the sandboxed pool."""
    from coordinator._cli.demo import EXAMPLES, provider_demo

    path = scenario or EXAMPLES / "regions" / "brain.scenario.json"
    shown = f"examples/{path.relative_to(EXAMPLES)}" if path.is_relative_to(EXAMPLES) else path
    click.secho(f"== region scenario {shown}", bold=True)
    code = region_cli.run_test(path, as_json=False)
    click.echo()
    click.secho("== provider examples/providers/groq.rhai against a local stand-in API", bold=True)
    ok = asyncio.run(provider_demo(click.echo))
    click.echo()
    click.secho(
        "== rhaipool serve in the background, driven with coordinator.client, then stopped", bold=True
    )
    from coordinator._cli.service_demo import service_demo

    served = service_demo(click.echo)
    sys.exit(0 if code == 0 and ok and served else 1)


@main.group()
def bench() -> None:
    """Benchmarks (not tests): each prints ratios against a baseline measured in the same run."""


pool_bench.name = "pool"  # its name in help and in the generated CLI reference
bench.add_command(pool_bench)


@bench.command("regions", context_settings=_PASSTHROUGH)
@click.pass_context
def bench_regions(ctx: click.Context) -> None:
    """Region render through the pool vs in-process (--entries, --repeat, --json)."""
    from coordinator.bench.regions import main as run

    run(ctx.args)


@bench.command("providers", context_settings=_PASSTHROUGH)
@click.pass_context
def bench_providers(ctx: click.Context) -> None:
    """Inferences through the pool vs raw sockets, plain aiohttp and plain httpx (--help for options)."""
    from coordinator.bench.providers import main as run

    run(ctx.args)


@bench.command("service", context_settings=_PASSTHROUGH)
@click.pass_context
def bench_service(ctx: click.Context) -> None:
    """Hook and mock inference through rhaipool serve vs the in-process API (--concurrency, --json)."""
    from coordinator.bench.service import main as run

    run(ctx.args)


@bench.command("gateway", context_settings=_PASSTHROUGH)
@click.pass_context
def bench_gateway(ctx: click.Context) -> None:
    """Proxied inferences with wrk: nginx alone, the native and /v1 routes, LiteLLM (--help for options)."""
    from coordinator.bench.gateway import main as run

    run(ctx.args)


@bench.command("coordinators", context_settings=_PASSTHROUGH)
@click.pass_context
def bench_coordinators(ctx: click.Context) -> None:
    """1, 2 and 3 coordinators over PostgreSQL behind HAProxy, and kill -9 failover (--kills, --json)."""
    from coordinator.bench.coordinators import main as run

    run(ctx.args)


@bench.command("nodes", context_settings=_PASSTHROUGH)
@click.pass_context
def bench_nodes(ctx: click.Context) -> None:
    """A local pool vs a coordinator with 2 nodes in network namespaces (root; --calls, --json)."""
    from coordinator.bench.nodes import main as run

    run(ctx.args)


@bench.command("curves", context_settings=_PASSTHROUGH)
@click.pass_context
def bench_curves(ctx: click.Context) -> None:
    """CPU per call and memory vs concurrency, ctx size, distinct scripts (--plot DIR, --json)."""
    from coordinator.bench.curves import main as run

    run(ctx.args)


@bench.command("binding", context_settings=_PASSTHROUGH)
@click.pass_context
def bench_binding(ctx: click.Context) -> None:
    """rhai-python call overhead, ctx round trip vs msgpack, ops/s, compile times (--json)."""
    from coordinator.bench.binding import main as run

    run(ctx.args)


@bench.command("tenants", context_settings=_PASSTHROUGH)
@click.pass_context
def bench_tenants(ctx: click.Context) -> None:
    """A quiet tenant beside a flood and a crasher; coordinator RSS under floods; tenants at once.

    With --service: tenant B's p50/p99 through rhaipool serve, alone and beside each hostile-tenant
    attack (coordinator.bench.service_tenants; --seconds, --workers, --only NAME, --json).
    With --service --capacity: the most tenants, regions and scripts one service holds within its bounds
    (coordinator.bench.service_capacity; --max-tenants, --max-rss-mib, --steps, --json)."""
    args = list(ctx.args)
    if "--service" in args and "--capacity" in args:
        args.remove("--service")
        args.remove("--capacity")
        from coordinator.bench.service_capacity import main as run_capacity

        run_capacity(args)
        return
    if "--service" in args:
        args.remove("--service")
        from coordinator.bench.service_tenants import main as run_service

        run_service(args)
        return
    from coordinator.bench.tenants import main as run

    run(args)


add_verbosity(main)
