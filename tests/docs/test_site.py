"""The documentation builds with warnings as errors, and its generated parts cover the code.

One strict build per module (a few seconds); the checks then read the built HTML: every click
command has its section in the CLI reference, every pool option and failure label its row.
"""

from __future__ import annotations

import dataclasses
import html
import re
import subprocess
import sys
from pathlib import Path

import click
import pytest

from coordinator import Deadlines, Limits, PoolConfig, Recycling, RetryPolicy
from coordinator._cli.main import main as cli_main
from coordinator.providers.failures import FAILURE_KINDS, REASON_REMEDIES

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).with_name("mkdocs")


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [str(MKDOCS), "build", "--strict", "-d", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return out


def page_text(site: Path, page: str) -> str:
    """The page's text, tags stripped, entities decoded."""
    raw = (site / page).read_text(encoding="utf-8")
    return html.unescape(re.sub(r"<[^>]+>", " ", raw))


def commands(group: click.Group, prefix: str = "") -> list[str]:
    """Every visible command path: ``validate``, ``keys generate``, ``bench pool``…"""
    out = []
    for name, command in sorted(group.commands.items()):
        if command.hidden:
            continue
        path = f"{prefix}{name}"
        out.append(path)
        if isinstance(command, click.Group):
            out.extend(commands(command, path + " "))
    return out


def test_every_command_is_in_the_cli_reference(site: Path) -> None:
    text = page_text(site, "reference/cli.html")
    missing = [path for path in commands(cli_main) if f"rhaipool {path} [OPTIONS]" not in text]
    assert not missing, f"commands without a section in the CLI reference: {missing}"


def test_every_option_of_every_command_is_in_the_cli_reference(site: Path) -> None:
    text = page_text(site, "reference/cli.html")
    options = {
        opt
        for command in [cli_main, *cli_main.commands.values()]
        if not command.hidden
        for param in command.params
        for opt in getattr(param, "opts", [])
        if opt.startswith("--")
    }
    assert options, "no options found"
    assert not [opt for opt in sorted(options) if opt not in text]


@pytest.mark.parametrize("cls", [PoolConfig, Limits, Deadlines, Recycling, RetryPolicy])
def test_every_pool_option_is_documented_with_its_default(site: Path, cls: type) -> None:
    raw = (site / "reference" / "configuration.html").read_text(encoding="utf-8")
    raw = raw[raw.index('id="pool-options-python"') :]
    raw = raw[raw.index(f"<code>{cls.__name__}</code>") :]
    for field in dataclasses.fields(cls):
        row = re.search(rf"<tr>\s*<td><code>{field.name}</code></td>(.*?)</tr>", raw, re.DOTALL)
        assert row, f"{cls.__name__}.{field.name} has no row"
        cells = re.findall(r"<td>(.*?)</td>", row.group(1), re.DOTALL)
        if field.default is not dataclasses.MISSING:
            assert html.unescape(cells[1]).startswith(f"<code>{field.default!r}</code>"), cells
        assert cells[2].strip(), f"{cls.__name__}.{field.name} says nothing about what it does"


def test_every_failure_label_is_listed_with_its_remedy(site: Path) -> None:
    text = " ".join(page_text(site, "scripts/errors.html").split())
    for label, remedy in {**FAILURE_KINDS, **REASON_REMEDIES}.items():
        assert f"{label} {' '.join(remedy.split())}" in text


def test_api_reference_is_generated_from_docstrings(site: Path) -> None:
    text = page_text(site, "reference/api/pool.html")
    assert "Pool" in text and "call_detailed" in text
    providers = page_text(site, "reference/api/providers.html")
    assert "ProviderRuntime" in providers and "inference" in providers


def test_the_site_needs_no_network(site: Path) -> None:
    """Readable offline from file://: no page loads a script or a stylesheet from elsewhere."""
    for page in site.rglob("*.html"):
        raw = page.read_text(encoding="utf-8")
        remote = re.findall(r'<(?:script|link)[^>]+(?:src|href)="(https?:)?//[^"]+"', raw)
        assert not remote, f"{page.relative_to(site)} loads {remote}"
