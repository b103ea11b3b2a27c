"""``rhaipool serve --config FILE``: the ``[serve]`` and ``[tenants.<id>]`` tables, read once per (re)load.

The same TOML file also holds the provider tables (``[model_providers.<name>]`` …), read by
``coordinator.providers.config``; this module reads only what the service adds. Tokens are never
stored: a tenant is configured by the hex sha256 of its bearer token, so the file can be shared with
whoever deploys the service without handing out the tokens themselves.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Final

from coordinator.nodes.config import NodesConfig, parse_nodes_config
from coordinator.nodes.errors import NodesConfigError
from coordinator.providers.config import ProviderConfigError, ProvidersConfig, parse_config
from coordinator.service.errors import ServiceConfigError

__all__ = [
    "DEFAULT_GRACE_SECS",
    "DEFAULT_LISTEN",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_HEADER_BYTES",
    "TENANT_ID",
    "ServeConfig",
    "ServiceConfigError",
    "check_sha256",
    "load_service_config",
    "parse_service_config",
]

DEFAULT_LISTEN: Final = "127.0.0.1:8765"
DEFAULT_MAX_BODY_BYTES: Final = 1 << 20
DEFAULT_MAX_HEADER_BYTES: Final = 16 << 10
DEFAULT_GRACE_SECS: Final = 10.0
_SHA256: Final = re.compile(r"^[0-9a-f]{64}$")
TENANT_ID: Final = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """Everything ``rhaipool serve`` reads from its config file."""

    host: str = "127.0.0.1"
    port: int = 8765
    database: Path = Path("rhaipool.db")
    admin_token_sha256: str | None = None
    tenants: dict[str, str] = field(default_factory=dict)
    """tenant id → hex sha256 of its bearer token."""
    tls_cert: Path | None = None
    tls_key: Path | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    grace_secs: float = DEFAULT_GRACE_SECS
    workers: int | None = None
    local_workers: int | None = None
    """``[serve] local_workers``: workers on this machine (0: every call runs on nodes)."""
    nodes: NodesConfig | None = None
    """``[nodes]``: where worker nodes join over CurveZMQ (``None``: no nodes)."""
    providers: ProvidersConfig = field(default_factory=ProvidersConfig)
    source: Path | None = None


def check_sha256(value: Any, where: str) -> str:
    """The lower-case hex digest, or ServiceConfigError naming ``where``."""
    if not isinstance(value, str) or not _SHA256.match(value.lower()):
        raise ServiceConfigError(f"{where} must be 64 hex digits (the sha256 of the token)")
    return value.lower()


def _listen(value: Any) -> tuple[str, int]:
    if not isinstance(value, str):
        raise ServiceConfigError('[serve] listen must be "HOST:PORT"')
    host, sep, port = value.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) < 65536:
        raise ServiceConfigError(f'[serve] listen must be "HOST:PORT", got {value!r}')
    return host.strip("[]"), int(port)


def _path(value: Any, where: str, base: Path) -> Path:
    if not isinstance(value, str) or not value:
        raise ServiceConfigError(f"{where} must be a path")
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _positive(value: Any, where: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ServiceConfigError(f"{where} must be a positive number")
    return value


def _tenants(raw: Any) -> dict[str, str]:
    if not isinstance(raw, dict):
        raise ServiceConfigError("[tenants] must be a table of [tenants.<id>] tables")
    tenants: dict[str, str] = {}
    for tenant, table in raw.items():
        if not TENANT_ID.match(tenant):
            raise ServiceConfigError(
                f"[tenants.{tenant}]: ids may contain only letters, digits, '.', '_', '-'"
            )
        if not isinstance(table, dict) or "token_sha256" not in table:
            raise ServiceConfigError(f"[tenants.{tenant}] requires token_sha256")
        tenants[tenant] = check_sha256(table["token_sha256"], f"[tenants.{tenant}] token_sha256")
    return tenants


def parse_service_config(data: dict[str, Any], base: Path) -> ServeConfig:
    """Build a snapshot from parsed TOML; relative paths are taken from ``base`` (the file's folder)."""
    serve = data.get("serve", {})
    if not isinstance(serve, dict):
        raise ServiceConfigError("[serve] must be a table")
    host, port = _listen(serve.get("listen", DEFAULT_LISTEN))
    admin = serve.get("admin_token_sha256")
    cert, key = serve.get("tls_cert"), serve.get("tls_key")
    if (cert is None) != (key is None):
        raise ServiceConfigError("[serve] tls_cert and tls_key go together")
    workers = serve.get("workers")
    local_workers = serve.get("local_workers")
    if local_workers is not None and (type(local_workers) is not int or local_workers < 0):
        raise ServiceConfigError("[serve] local_workers must be a whole number >= 0")
    if local_workers is not None and workers is not None:
        raise ServiceConfigError("[serve] workers and local_workers are the same setting: give one")
    try:
        providers = parse_config(data, base_dir=base)
        nodes = parse_nodes_config(data, base, check_files=False)  # files: load_service_config
    except (ProviderConfigError, NodesConfigError) as exc:
        raise ServiceConfigError(str(exc)) from exc
    if local_workers == 0 and nodes is None:
        raise ServiceConfigError("[serve] local_workers = 0 needs a [nodes] table: no worker would run")
    return ServeConfig(
        host=host,
        port=port,
        database=_path(serve.get("database", "rhaipool.db"), "[serve] database", base),
        admin_token_sha256=None if admin is None else check_sha256(admin, "[serve] admin_token_sha256"),
        tenants=_tenants(data.get("tenants", {})),
        tls_cert=None if cert is None else _path(cert, "[serve] tls_cert", base),
        tls_key=None if key is None else _path(key, "[serve] tls_key", base),
        max_body_bytes=int(_positive(serve.get("max_body_bytes", DEFAULT_MAX_BODY_BYTES), "max_body_bytes")),
        max_header_bytes=int(
            _positive(serve.get("max_header_bytes", DEFAULT_MAX_HEADER_BYTES), "max_header_bytes")
        ),
        grace_secs=float(_positive(serve.get("grace_secs", DEFAULT_GRACE_SECS), "[serve] grace_secs")),
        workers=None if workers is None else int(_positive(workers, "[serve] workers")),
        local_workers=local_workers,
        nodes=nodes,
        providers=providers,
    )


def load_service_config(path: Path) -> ServeConfig:
    """Read ``path``; any problem is a :class:`ServiceConfigError` with one line saying what."""
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ServiceConfigError(f"cannot read config {path}: {exc}") from exc
    config = parse_service_config(data, path.resolve().parent)
    if config.nodes is not None:  # at start-up: a missing key fails now, not at every node's handshake
        try:
            parse_nodes_config(data, path.resolve().parent, check_files=True)
        except NodesConfigError as exc:
            raise ServiceConfigError(str(exc)) from exc
    return replace(config, source=path)
