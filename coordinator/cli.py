"""The ``rhaipool`` command line.

Sub-commands live next to the runtime they drive and are attached here, so this
module stays a table of contents.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from coordinator import __version__

REQUIRED = {"region": [("render", 1)], "provider": []}


@click.group()
@click.version_option(__version__, prog_name="rhaipool")
def main() -> None:
    """Run untrusted Rhai region and provider scripts in sandboxed workers."""


@main.command()
@click.argument("path", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--kind", type=click.Choice(["region", "provider"]), required=True)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def validate(path: Path, kind: str, as_json: bool) -> None:
    """Compile a script and check the functions its kind requires."""
    import rhai

    problems: list[str] = []
    functions: list[tuple[str, int]] = []
    try:
        script = rhai.Engine(json_functions=kind == "provider").compile(path.read_text(), name=str(path))
        functions = script.functions
        problems += [f"missing required function {n}/{a}" for n, a in REQUIRED[kind] if not script.has_function(n, a)]
    except rhai.CompileError as exc:
        problems.append(str(exc))
    if as_json:
        click.echo(json.dumps({"ok": not problems, "problems": problems, "functions": functions}))
    else:
        for p in problems:
            click.echo(f"error: {p}", err=True)
        if not problems:
            click.echo(f"ok: {path} ({', '.join(f'{n}/{a}' for n, a in functions)})")
    sys.exit(1 if problems else 0)


@main.command()
def demo() -> None:
    """Compile and run a bundled region script."""
    import rhai

    source = 'fn render(ctx) { let out = []; for e in ctx.entries { out.push("- " + e.content); } out }'
    script = rhai.Engine(json_functions=False).compile(source, name="demo.rhai")
    ctx = {"entries": [{"content": "remember the user's name"}, {"content": "prefer short answers"}]}
    click.echo(json.dumps(script.call("render", ctx, timeout=1.0), indent=2))
