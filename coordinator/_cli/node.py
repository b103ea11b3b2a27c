"""``rhaipool node --join tcp://HOST:PORT``: run sandboxed workers for a coordinator on this machine.

The work is in :mod:`coordinator.nodes.node`; this module parses arguments, checks the key files and
the endpoint before joining (exit 2 with one line on a mistake), and turns SIGTERM/SIGINT into a drain.
``--join`` repeated shares this node among coordinators (each owning a shard of the tenants): one
session and its own share of the workers per coordinator.
"""

from __future__ import annotations

import logging
import os
import socket
from pathlib import Path

import click

from coordinator._cli.output import EXIT_USAGE, fail
from coordinator.nodes.auth import curve_client
from coordinator.nodes.config import parse_tcp_endpoint
from coordinator.nodes.errors import KeyFileError, NodesConfigError
from coordinator.nodes.node import Node, NodeSettings, run_all, split_workers

__all__ = ["node"]

_FILE = click.Path(dir_okay=False, path_type=Path)


def _check_keys(secret_key: Path, server_key: Path) -> None:
    """Fail now, not at every reconnection: ``curve_client`` reads both files the way a session will."""
    import zmq

    context = zmq.Context()
    try:
        with context.socket(zmq.DEALER) as probe:
            curve_client(probe, secret_key, server_key)
    finally:
        context.term()


@click.command("node")
@click.option(
    "--join", "joins", required=True, multiple=True, metavar="tcp://HOST:PORT",
    help="The coordinator's [nodes] listen; repeat to share this node among coordinators.",
)  # fmt: skip
@click.option(
    "--secret-key", required=True, type=_FILE, help="This node's .key_secret (rhaipool keys generate)."
)
@click.option(
    "--server-key", "server_keys", required=True, multiple=True, type=_FILE,
    help="The coordinator's public .key (no other is trusted); once, or once per --join in order.",
)  # fmt: skip
@click.option(
    "--workers", type=click.IntRange(1, 4096), default=None,
    help="Workers to run [default: one per CPU], shared out over the coordinators joined.",
)  # fmt: skip
@click.option("--name", default=None, help="How the coordinator names this node [default: the host name].")
@click.option("--group", default="", help="Node group: tenants' dedicated workers may be pinned to one.")
def node(
    joins: tuple[str, ...],
    secret_key: Path,
    server_keys: tuple[Path, ...],
    workers: int | None,
    name: str | None,
    group: str,
) -> None:
    """Join a coordinator over CurveZMQ and run sandboxed workers for it; SIGTERM drains, then leaves."""
    if len(server_keys) not in (1, len(joins)):
        fail("give --server-key once, or once per --join", False, EXIT_USAGE, "UsageError")
    keys = server_keys * len(joins) if len(server_keys) == 1 else server_keys
    try:
        for join, server_key in zip(joins, keys, strict=True):
            parse_tcp_endpoint(join, "--join")
            _check_keys(secret_key, server_key)
    except (NodesConfigError, KeyFileError) as exc:
        fail(str(exc), False, EXIT_USAGE, type(exc).__name__)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s node %(levelname)s %(message)s")
    total = workers or max(1, len(os.sched_getaffinity(0)))
    shares = split_workers(total, len(joins))
    runners = [
        Node(NodeSettings(join=join, secret_key=secret_key, server_key=server_key, workers=share,
                          name=name or socket.gethostname(), group=group))
        for join, server_key, share in zip(joins, keys, shares, strict=True)
    ]  # fmt: skip
    raise SystemExit(run_all(runners))
