"""The ``[nodes]`` table of the service config: where nodes join, with which key, and whom to admit.

    [nodes]
    listen = "tcp://HOST:PORT"          # the CurveZMQ port nodes join
    secret_key = "FILE"                 # the coordinator's own .key_secret
    authorized_keys = "DIR"             # node public keys admitted (followed live: coordinator.nodes.auth)
    heartbeat = 0.5                     # seconds between heartbeats, both ways (optional)
    liveness = 2.5                      # seconds of silence before either side gives the other up

Checked when the config is read, so a coordinator with a missing key or directory fails at start-up
with one line saying which key is wrong, instead of refusing every node later. The same endpoint rule
reads a node's ``--join tcp://HOST:PORT``.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import zmq.auth

from coordinator.nodes.errors import NodesConfigError

__all__ = ["NodesConfig", "parse_nodes_config", "parse_tcp_endpoint"]

log = logging.getLogger("coordinator.nodes")
_ENDPOINT = re.compile(r"tcp://(?P<host>\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9*._-]+):(?P<port>[0-9]{1,5})")


@dataclass(frozen=True, slots=True)
class NodesConfig:
    """What the coordinator needs to let nodes join."""

    listen: str
    host: str
    port: int
    secret_key: Path
    authorized_keys: Path
    heartbeat: float = 0.5
    liveness: float = 2.5
    """A node silent this long is expired (checked every 0.1 s: by default within 3 s)."""


def parse_tcp_endpoint(value: Any, where: str) -> tuple[str, int]:
    """(host, port) of ``tcp://HOST:PORT``; HOST may be a name, an address, ``[IPv6]`` or ``*``."""
    match = _ENDPOINT.fullmatch(value) if isinstance(value, str) else None
    if match is None or not 0 < int(match["port"]) < 65536:
        raise NodesConfigError(where, f'must be "tcp://HOST:PORT", got {value!r}')
    return match["host"].strip("[]"), int(match["port"])


def _path(table: dict[str, Any], key: str, base: Path) -> Path:
    value = table.get(key)
    if not isinstance(value, str) or not value:
        raise NodesConfigError(f"[nodes] {key}", "must be a path")
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _seconds(table: dict[str, Any], key: str, default: float) -> float:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= 3600:
        raise NodesConfigError(f"[nodes] {key}", f"must be seconds in (0, 3600], got {value!r}")
    return float(value)


def _check_secret_key(path: Path) -> None:
    try:
        _public, secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise NodesConfigError("[nodes] secret_key", f"cannot read {path}: {exc}") from None
    if not secret:
        raise NodesConfigError(
            "[nodes] secret_key", f"{path} holds no secret key (give the .key_secret file)"
        )
    if path.stat().st_mode & 0o007:
        log.warning("%s is readable by other users: chmod 0600 it", path)


def parse_nodes_config(data: dict[str, Any], base: Path, check_files: bool = True) -> NodesConfig | None:
    """The ``[nodes]`` table of parsed TOML (None when absent: no remote nodes);
    paths relative to ``base``."""
    table = data.get("nodes")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise NodesConfigError("[nodes]", "must be a table")
    unknown = set(table) - {"listen", "secret_key", "authorized_keys", "heartbeat", "liveness"}
    if unknown:
        raise NodesConfigError("[nodes]", f"unknown key(s) {', '.join(sorted(unknown))}")
    host, port = parse_tcp_endpoint(table.get("listen"), "[nodes] listen")
    config = NodesConfig(
        listen=table["listen"],
        host=host,
        port=port,
        secret_key=_path(table, "secret_key", base),
        authorized_keys=_path(table, "authorized_keys", base),
        heartbeat=_seconds(table, "heartbeat", 0.5),
        liveness=_seconds(table, "liveness", 2.5),
    )
    if config.liveness <= config.heartbeat:
        raise NodesConfigError(
            "[nodes] liveness", "must be longer than heartbeat (several beats may be missed)"
        )
    if check_files:
        _check_secret_key(config.secret_key)
        if not config.authorized_keys.is_dir():
            raise NodesConfigError("[nodes] authorized_keys", f"{config.authorized_keys} is not a directory")
    return config
