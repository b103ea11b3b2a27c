"""The ``rhaipool`` command line.

Sub-commands live next to the runtime they drive and are attached here, so this
module stays a table of contents.
"""

from __future__ import annotations

import click

from coordinator import __version__


@click.group()
@click.version_option(__version__, prog_name="rhaipool")
def main() -> None:
    """Run untrusted Rhai region and provider scripts in sandboxed workers."""
