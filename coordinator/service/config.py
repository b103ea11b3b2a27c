"""``rhaipool serve --config FILE``: the ``[serve]`` and ``[tenants.<id>]`` tables, read once per (re)load.

The same TOML file also holds the provider tables (``[model_providers.<name>]`` …), read by
``coordinator.providers.config``; this module reads only what the service adds. Tokens are never
stored: a tenant is configured by the hex sha256 of its bearer token, so the file can be shared with
whoever deploys the service without handing out the tokens themselves.

The module is long because each key is read with its own refusal message (a bad config is refused at
start with the key named); the readers are small and share one set of checks (``_positive`` and the like).
"""

from __future__ import annotations

import difflib
import re
import tomllib
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Final
from urllib.parse import urlsplit

from coordinator._core.config import DEFAULT_TENANT_MAX_SCRIPT_BYTES, DEFAULT_TENANT_MAX_SCRIPTS
from coordinator.egress import EgressConfigError, OperatorEgress, parse_operator_egress
from coordinator.nodes.config import NodesConfig, parse_nodes_config
from coordinator.nodes.errors import NodesConfigError
from coordinator.providers.config import (
    DEFAULT_CALL_TIMEOUT_SECS,
    ProviderConfigError,
    ProvidersConfig,
    parse_config,
)
from coordinator.service.connections import ConnectionLimits, parse_connection_limits
from coordinator.service.errors import ServiceConfigError
from coordinator.service.storage_backends import is_database_url

__all__ = [
    "DEFAULT_GRACE_SECS",
    "DEFAULT_LISTEN",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_HEADER_BYTES",
    "DEFAULT_MODELS_CACHE_SECS",
    "LIMIT_KEYS",
    "TENANT_ID",
    "ServeConfig",
    "ServiceConfigError",
    "TenantLimits",
    "check_sha256",
    "load_service_config",
    "parse_service_config",
]

DEFAULT_LISTEN: Final = "127.0.0.1:8765"
DEFAULT_MAX_BODY_BYTES: Final = 1 << 20
DEFAULT_MAX_HEADER_BYTES: Final = 16 << 10
DEFAULT_GRACE_SECS: Final = 10.0
DEFAULT_MODELS_CACHE_SECS: Final = 60.0
_SHA256: Final = re.compile(r"^[0-9a-f]{64}$")
TENANT_ID: Final = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


_MIB: Final = 1 << 20
DEFAULT_PROVIDER_CALL_SECS: Final = DEFAULT_CALL_TIMEOUT_SECS
DEFAULT_TENANT_RETENTION_DAYS: Final = 30.0


@dataclass(frozen=True, slots=True, kw_only=True)
class TenantLimits:
    """Every per-tenant bound, as ``[serve.tenant_defaults]`` and ``[tenants.<id>]`` set it.

    The pool's (calls, CPU, loaded scripts, dedicated workers, node group), egress's (requests and bytes
    in flight), the provider calls' wall clock, and the service's own
    (regions, budgets, entry bytes, stored scripts, streams, connections). One tenant's table overrides
    the defaults key by key; a SIGHUP applies a change to the next call.
    """

    max_calls: int | None = None
    """Unfinished calls (queued + running) at once; ``None``: no cap."""
    max_inflight: int | None = None
    """Calls placed at workers at once; ``None``: no cap."""
    max_queued: int | None = None
    """Calls waiting for a worker; ``None``: no cap."""
    cpu_seconds_per_minute: float | None = None
    """CPU-seconds the tenant's calls may use per sliding minute; ``None``: no cap."""
    max_loaded_scripts: int | None = DEFAULT_TENANT_MAX_SCRIPTS
    """Scripts the pool holds compiled for the tenant at once."""
    max_loaded_script_bytes: int | None = DEFAULT_TENANT_MAX_SCRIPT_BYTES
    """Source bytes the pool holds compiled for the tenant at once."""
    dedicated_workers: int = 0
    """Workers of the tenant's own (its calls run only there, nobody else's do)."""
    node_group: str | None = None
    """Take the dedicated workers from nodes of this group (``rhaipool node --group``)."""
    egress_max_inflight: int = 128
    """Provider HTTP requests in flight at once."""
    egress_max_bytes: int = 64 * _MIB
    """Response bytes egress holds for the tenant at once."""
    provider_call_secs: float = DEFAULT_PROVIDER_CALL_SECS
    """Wall-clock bound of one provider call; at most the top-level ``call_timeout_secs``."""
    max_regions: int = 1000
    """Regions open at once."""
    max_region_budget: int = 10_000_000
    """Largest token budget of one region."""
    max_entry_bytes: int = 64 * _MIB
    """Bytes of entries the tenant's regions hold in all (memory and database): content, key, tool calls
    (ids, names, arguments as JSON) and a tool result's call id and tool name."""
    max_scripts: int = 256
    """Scripts stored."""
    max_script_bytes: int = 16 * _MIB
    """Bytes of scripts stored."""
    max_provider_tables: int = 64
    """Provider tables of the tenant's own (``PUT /api/providers/{name}/config``)."""
    max_provider_table_bytes: int = _MIB
    """Bytes of the tenant's own provider tables in all, as JSON."""
    max_idempotency_bytes: int = 16 * _MIB
    """Bytes of answers kept for ``Idempotency-Key`` (bodies, keys, requests, 128 per key); past it the
    oldest answers' bodies go first (a replay answers 409: it applied), then the oldest keys."""
    max_streams: int = 32
    """Provider streams open at once."""
    max_connections: int = 64
    """HTTP requests of the tenant being served at once (each holds one connection)."""


LIMIT_KEYS: Final = tuple(f.name for f in fields(TenantLimits))
_FLOATS: Final = frozenset({"cpu_seconds_per_minute", "provider_call_secs"})
_TENANT_KEYS: Final = ("token_sha256", "providers", *LIMIT_KEYS)
SERVE_KEYS: Final = (
    "listen", "database", "admin_token_sha256", "metrics_token_sha256", "tls_cert", "tls_key",
    "max_body_bytes", "max_header_bytes", "grace_secs", "workers", "local_workers",
    "secrets_key_file", "tenant_retention_days", "tenant_defaults", "egress",
    "header_timeout_secs", "body_timeout_secs", "idle_timeout_secs", "max_connections",
    "max_connections_per_address", "fd_reserve", "models_cache_secs", "lease_secs", "advertise_url",
)  # fmt: skip
"""Every key ``[serve]`` may hold (another is refused, with the nearest of these)."""


@dataclass(frozen=True, slots=True)
class ServeConfig:
    """Everything ``rhaipool serve`` reads from its config file."""

    host: str = "127.0.0.1"
    port: int = 8765
    database: Path = Path("rhaipool.db")
    database_url: str | None = None
    """``[serve] database`` as a ``postgresql://`` URL: one PostgreSQL database shared by several
    coordinators, which serve each tenant under a lease (``database`` is then only the config
    file's folder, where relative paths of provider tables start)."""
    lease_secs: float = 10.0
    """With ``database_url``: how long a tenant's lease lasts unrenewed (renewed every third of it)."""
    advertise_url: str | None = None
    """With ``database_url``: where the other coordinators reach this one (``[serve] advertise_url``, or
    ``listen``'s address; ``None`` when it listens on every interface: then the address this machine
    reaches the database from, found at start-up). A request for a tenant this coordinator owns is
    forwarded there."""
    admin_token_sha256: str | None = None
    metrics_token_sha256: str | None = None
    """A token that may read ``/metrics`` (and nothing else); the admin token may too."""
    tenants: dict[str, str] = field(default_factory=dict)
    """tenant id → hex sha256 of its bearer token (the config file's tenants)."""
    grants: dict[str, tuple[str, ...]] = field(default_factory=dict)
    """tenant id → the operator's ``[model_providers.<name>]`` tables it may use."""
    tenant_defaults: TenantLimits = field(default_factory=TenantLimits)
    tenant_limits: dict[str, TenantLimits] = field(default_factory=dict)
    """tenant id → its limits (the defaults with its own table's keys on top)."""
    secrets_key_file: Path | None = None
    """File holding the key (``Fernet.generate_key()``) that seals tenants' provider tables at rest."""
    tenant_retention_days: float = DEFAULT_TENANT_RETENTION_DAYS
    """How long a revoked API tenant's data is kept before it is purged."""
    egress: OperatorEgress | None = None
    """``[serve.egress]``: the operator's egress policy over every tenant's scripts."""
    connections: ConnectionLimits = field(default_factory=ConnectionLimits)
    """Header, body and idle timeouts, the connection caps and the descriptor reserve."""
    tls_cert: Path | None = None
    tls_key: Path | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    max_header_bytes: int = DEFAULT_MAX_HEADER_BYTES
    grace_secs: float = DEFAULT_GRACE_SECS
    models_cache_secs: float = DEFAULT_MODELS_CACHE_SECS
    """How long ``GET /v1/models`` reuses a provider's ``list_models`` answer (0: ask every time)."""
    workers: int | None = None
    local_workers: int | None = None
    """``[serve] local_workers``: workers on this machine (0: every call runs on nodes)."""
    nodes: NodesConfig | None = None
    """``[nodes]``: where worker nodes join over CurveZMQ (``None``: no nodes)."""
    providers: ProvidersConfig = field(default_factory=ProvidersConfig)
    source: Path | None = None

    def limits(self, tenant: str) -> TenantLimits:
        """The tenant's limits (its own table's, else the defaults)."""
        return self.tenant_limits.get(tenant, self.tenant_defaults)


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


def _advertise_url(value: Any, host: str, port: int, tls: bool) -> str | None:
    """``[serve] advertise_url`` checked (``http(s)://HOST[:PORT]``, no path), or the one ``listen``
    gives (None when it listens on every interface: the service finds its address at start-up)."""
    if value is None:
        if host in ("", "0.0.0.0", "::"):
            return None
        return f"{'https' if tls else 'http'}://{f'[{host}]' if ':' in host else host}:{port}"
    if not isinstance(value, str):
        raise ServiceConfigError('[serve] advertise_url must be a URL such as "http://10.0.0.5:8765"')
    parts = urlsplit(value)
    try:
        bad_port = parts.port is None and parts.netloc.endswith(":")
    except ValueError:
        bad_port = True
    if (
        bad_port
        or parts.scheme not in ("http", "https")
        or not parts.hostname
        or parts.path.strip("/")
        or parts.query
        or parts.username is not None
    ):
        raise ServiceConfigError(
            f'[serve] advertise_url must be "http(s)://HOST:PORT" (no path), got {value!r}'
        )
    return value.rstrip("/")


def _path(value: Any, where: str, base: Path) -> Path:
    if not isinstance(value, str) or not value:
        raise ServiceConfigError(f"{where} must be a path")
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _database(value: Any, base: Path) -> Path:
    if isinstance(value, str) and is_database_url(value):
        return base / "rhaipool.db"  # not opened: the URL is the database
    return _path(value, "[serve] database", base)


def _database_url(value: Any) -> str | None:
    if not isinstance(value, str) or not is_database_url(value):
        return None
    if len(value) <= len("postgresql://") or value.endswith("://"):
        raise ServiceConfigError(
            "[serve] database must be a file path or a postgresql://… URL naming a server"
        )
    return value


def _positive(value: Any, where: str) -> Any:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
        raise ServiceConfigError(f"{where} must be a positive number")
    return value


def _seconds(value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < 1e9:
        raise ServiceConfigError("[serve] models_cache_secs must be a number of seconds >= 0")
    return float(value)


def unknown_key(key: str, known: Any, where: str) -> ServiceConfigError:
    """The one-line refusal of a key nobody reads, with the nearest known one."""
    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f" (did you mean '{close[0]}'?)" if close else ""
    return ServiceConfigError(f"{where}: unknown key '{key}'{hint}")


def _limit(key: str, value: Any, where: str) -> Any:
    if key == "node_group":
        if not isinstance(value, str) or not value:
            raise ServiceConfigError(f"{where} node_group must be a group name")
        return value
    if key in _FLOATS:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < 1e9:
            raise ServiceConfigError(f"{where} {key} must be a positive number of seconds")
        return float(value)
    low = 0 if key == "dedicated_workers" else 1
    if type(value) is not int or not low <= value < 1 << 53:
        raise ServiceConfigError(f"{where} {key} must be a whole number >= {low}")
    return value


def _limits(table: dict[str, Any], base: TenantLimits, where: str, ceiling: float) -> TenantLimits:
    """``base`` with the limit keys of ``table`` on top (others are the caller's to check)."""
    changes = {key: _limit(key, table[key], where) for key in LIMIT_KEYS if key in table}
    limits = replace(base, **changes)
    if limits.provider_call_secs > ceiling:
        raise ServiceConfigError(
            f"{where} provider_call_secs must be at most the top-level call_timeout_secs ({ceiling:g})"
        )
    return limits


def _tenants(
    raw: Any, defaults: TenantLimits, ceiling: float
) -> tuple[dict[str, str], dict[str, tuple[str, ...]], dict[str, TenantLimits]]:
    if not isinstance(raw, dict):
        raise ServiceConfigError("[tenants] must be a table of [tenants.<id>] tables")
    tenants: dict[str, str] = {}
    grants: dict[str, tuple[str, ...]] = {}
    limits: dict[str, TenantLimits] = {}
    for tenant, table in raw.items():
        if not TENANT_ID.match(tenant):
            raise ServiceConfigError(
                f"[tenants.{tenant}]: ids may contain only letters, digits, '.', '_', '-'"
            )
        if not isinstance(table, dict) or "token_sha256" not in table:
            raise ServiceConfigError(f"[tenants.{tenant}] requires token_sha256")
        for key in table:
            if key not in _TENANT_KEYS:
                raise unknown_key(key, _TENANT_KEYS, f"[tenants.{tenant}]")
        tenants[tenant] = check_sha256(table["token_sha256"], f"[tenants.{tenant}] token_sha256")
        granted = table.get("providers", [])
        if not isinstance(granted, list) or not all(isinstance(p, str) and p for p in granted):
            raise ServiceConfigError(f"[tenants.{tenant}] providers must be a list of provider names")
        grants[tenant] = tuple(dict.fromkeys(granted))
        if any(key in table for key in LIMIT_KEYS):
            limits[tenant] = _limits(table, defaults, f"[tenants.{tenant}]", ceiling)
    return tenants, grants, limits


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
    for name in serve:
        if name not in SERVE_KEYS:
            raise unknown_key(name, SERVE_KEYS, "[serve]")
    metrics = serve.get("metrics_token_sha256")
    ceiling = providers.call_timeout_secs
    raw_defaults = serve.get("tenant_defaults", {})
    if not isinstance(raw_defaults, dict):
        raise ServiceConfigError("[serve.tenant_defaults] must be a table")
    for name in raw_defaults:
        if name not in LIMIT_KEYS:
            raise unknown_key(name, LIMIT_KEYS, "[serve.tenant_defaults]")
    defaults = _limits(
        raw_defaults, TenantLimits(provider_call_secs=ceiling), "[serve.tenant_defaults]", ceiling
    )
    tenants, grants, limits = _tenants(data.get("tenants", {}), defaults, ceiling)
    try:
        egress = None if "egress" not in serve else parse_operator_egress(serve["egress"])
    except EgressConfigError as exc:
        raise ServiceConfigError(str(exc)) from None
    secrets_key = serve.get("secrets_key_file")
    retention = _positive(
        serve.get("tenant_retention_days", DEFAULT_TENANT_RETENTION_DAYS), "[serve] tenant_retention_days"
    )
    return ServeConfig(
        host=host,
        port=port,
        database=_database(serve.get("database", "rhaipool.db"), base),
        database_url=_database_url(serve.get("database")),
        lease_secs=float(_positive(serve.get("lease_secs", 10.0), "[serve] lease_secs")),
        advertise_url=_advertise_url(serve.get("advertise_url"), host, port, cert is not None),
        admin_token_sha256=None if admin is None else check_sha256(admin, "[serve] admin_token_sha256"),
        metrics_token_sha256=None
        if metrics is None
        else check_sha256(metrics, "[serve] metrics_token_sha256"),
        tenants=tenants,
        grants=grants,
        tenant_defaults=defaults,
        tenant_limits=limits,
        secrets_key_file=None
        if secrets_key is None
        else _path(secrets_key, "[serve] secrets_key_file", base),
        tenant_retention_days=float(retention),
        egress=egress,
        connections=parse_connection_limits(serve),
        tls_cert=None if cert is None else _path(cert, "[serve] tls_cert", base),
        tls_key=None if key is None else _path(key, "[serve] tls_key", base),
        max_body_bytes=int(_positive(serve.get("max_body_bytes", DEFAULT_MAX_BODY_BYTES), "max_body_bytes")),
        max_header_bytes=int(
            _positive(serve.get("max_header_bytes", DEFAULT_MAX_HEADER_BYTES), "max_header_bytes")
        ),
        grace_secs=float(_positive(serve.get("grace_secs", DEFAULT_GRACE_SECS), "[serve] grace_secs")),
        models_cache_secs=_seconds(serve.get("models_cache_secs", DEFAULT_MODELS_CACHE_SECS)),
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
