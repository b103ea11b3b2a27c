"""Every command, given bad input with ``--json``: one ``{"error": {"class", "message"}}`` document, exit 2.

The table must name every command of the click tree, so a new command cannot skip the contract.
"""

from __future__ import annotations

import json
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from coordinator._cli.main import main

_BENCH = {
    "bench regions",
    "bench providers",
    "bench service",
    "bench gateway",
    "bench coordinators",
    "bench binding",
    "bench pool",
    "bench nodes",
    "bench curves",
    "bench tenants",
}
"""Benchmarks forward their arguments to their own parsers; they are not user commands with --json errors."""


def _leaves(group: click.Group, prefix: str = "") -> list[str]:
    out: list[str] = []
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        out += _leaves(command, path + " ") if isinstance(command, click.Group) else [path]
    return out


def _bad_inputs(tmp: Path) -> dict[str, list[str]]:
    missing = str(tmp / "missing.file")
    broken = tmp / "broken.toml"
    if tmp.is_dir():
        broken.write_text("providers_dir = [1\n")
    return {
        "validate": [missing, "--json"],
        "test": [missing, "--json"],
        "infer": ["--provider", "p", "--request", missing, "--json"],
        "models list": ["--provider", "p", "--config", str(broken), "--json"],
        "doctor": ["--config", str(broken), "--json"],
        "demo": ["--scenario", missing, "--json"],
        "keys generate": [str(tmp), "--json"],
        "keys list": ["--json", "--no-such-option"],
        "keys revoke": [str(tmp), "--json"],
        "serve": ["--json"],
        "node": ["--json"],
        "status": ["--json", "--no-such-option"],
        "scripts put": ["region_hook", "x", missing, "--json"],
        "scripts get": ["no_such_kind", "x", "--json"],
        "scripts list": ["--config", missing, "--json"],
        "scripts rm": ["region_hook", "--json"],
        "tenants list": ["--config", str(broken), "--json"],
        "tenants add": ["--json"],
        "tenants rotate": ["x", "--server", "http://127.0.0.1:9", "--config", missing, "--json"],
        "tenants revoke": ["--json"],
        "tenants purge": ["x", "--json"],
    }


def test_the_table_names_every_command(tmp_path: Path) -> None:
    assert set(_leaves(main)) - _BENCH == set(_bad_inputs(tmp_path))


@pytest.mark.parametrize("command", sorted(_bad_inputs(Path("/nonexistent"))))
def test_bad_input_gives_one_error_document_and_exit_2(tmp_path: Path, command: str) -> None:
    args = command.split() + _bad_inputs(tmp_path)[command]
    result = CliRunner().invoke(main, args, catch_exceptions=False)
    assert result.exit_code == 2, result.output
    doc = json.loads(result.stdout)
    assert set(doc) == {"error"}
    assert isinstance(doc["error"]["class"], str) and doc["error"]["message"]


@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_help_on_every_command_without_implementation_notes(flag: str) -> None:
    for command in _leaves(main):
        if command in _BENCH - {"bench pool"}:
            continue
        result = CliRunner().invoke(main, [*command.split(), flag])
        assert result.exit_code == 0, (command, result.output)
        for banned in ("SPEC", "§", "``", "not checked by click"):
            assert banned not in result.output, (command, banned)
        assert "-v, --verbose" in result.output and "-q, --quiet" in result.output


def test_every_option_has_help() -> None:
    def walk(command: click.Command, path: str) -> list[str]:
        if isinstance(command, click.Group):
            subs = [
                (n, c) for n, c in command.commands.items() if n != "bench"
            ]  # benchmarks: not user commands
            return [m for n, c in subs for m in walk(c, f"{path} {n}")]
        return [
            f"{path} {p.name}"
            for p in command.params
            if isinstance(p, click.Option) and not p.help and not p.hidden
        ]

    assert walk(main, "rhaipool") == []
