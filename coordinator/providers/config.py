"""Provider configuration: ``[model_providers.<name>]`` tables, discovery, script paths
(docs/scripts/providers.md#where-it-lives-and-how-it-is-named,
docs/reference/configuration.md#model_providersname).

A config file is read into frozen values; comparing two snapshots by value is what decides whether a
cached provider is still good, so editing a ``base_url`` reloads the provider and re-reading an
unchanged file does not. A snapshot read from a file remembers it, so :func:`refreshed` can pick up an
edit on the next use without a restart (seed: "changing a base_url or an api_key needs no restart").

A table may also come from elsewhere (a tenant's ``PUT /api/providers/{name}/config``):
:func:`parse_provider_table` applies the same rules, refusing the operator-only keys for a
tenant's own table, and :func:`redacted_table` is what may be shown of one (secret values masked).

Past 400 lines: the one parser of every provider key (the file's and a tenant's JSON table), with
the freezing that makes snapshots comparable and the redaction of secrets beside the keys they mask.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
import math
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import Any

from coordinator.egress import OperatorEgress, is_credential_shaped
from coordinator.egress.policy import host_of
from coordinator.providers.errors import ProviderConfigError

__all__ = [
    "DEFAULT_CALL_TIMEOUT_SECS",
    "DEFAULT_CONFIG_PATH",
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_PROVIDERS_DIR",
    "DEFAULT_REQUEST_TIMEOUT_SECS",
    "ProviderConfigError",
    "ProviderTable",
    "ProvidersConfig",
    "RateLimit",
    "candidate_names",
    "is_secret_key",
    "load_config",
    "parse_config",
    "parse_provider_table",
    "redacted_table",
    "refreshed",
    "resolve_script",
]

log = logging.getLogger(__name__)

DEFAULT_CONFIG_PATH = Path("~/.rhaipool/config.toml")
DEFAULT_PROVIDERS_DIR = Path("~/.rhaipool/providers")
DEFAULT_REQUEST_TIMEOUT_SECS = 900.0
#: Wall-clock cap of one provider call (inference with its retries, a stream, count_tokens,
#: list_models, initialize), whatever ``request_timeout_secs`` says (issue 22 point 6).
DEFAULT_CALL_TIMEOUT_SECS = 120.0
DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024
DEFAULT_RETRY_ATTEMPTS = 4
DEFAULT_RETRY_BASE_MS = 1000
#: Keys of a provider table that configure rhaipool itself and never reach ``initialize``.
OWN_KEYS = frozenset(
    {"script", "rate_limit", "egress_allow", "allowed_hosts", "env", "allow_env_vars", "max_response_bytes"}
)
#: Keys only the operator may set: a tenant's own table (``parse_provider_table(tenant_owned=True)``)
#: that names one is refused. They open addresses, expose host variables or name a file.
OPERATOR_ONLY_KEYS = ("egress_allow", "allow_env_vars", "script")
#: What :func:`redacted_table` shows in place of a secret value.
REDACTED = "********"
_DATETIME_KEY = "$__toml_private_datetime"
_I64 = (-(1 << 63), (1 << 63) - 1)


#: A URL's password (``scheme://user:PASSWORD@host``): secret whatever key holds the URL.
_URL_PASSWORD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://[^/?#@:\s]*:)([^/?#@\s]+)(@.*)$", re.DOTALL)


def is_secret_key(key: str) -> bool:
    """Whether a provider table key holds a secret: ``api_key`` or any credential-shaped name (a URL's
    password is secret under any key too)."""
    return key == "api_key" or is_credential_shaped(key)


def _masked(value: Any, secret: bool, mask: Callable[[str], str]) -> Any:
    """A thawed table value with every string under a secret key (at any depth), and the password of
    any URL (``https://user:PASSWORD@host``), passed through ``mask``."""
    if isinstance(value, dict):
        return {k: _masked(v, secret or is_secret_key(k), mask) for k, v in value.items()}
    if isinstance(value, list):
        return [_masked(v, secret, mask) for v in value]
    if isinstance(value, str) and secret:
        return mask(value)
    if isinstance(value, str) and "@" in value and (found := _URL_PASSWORD.match(value)):
        return found.group(1) + mask(found.group(2)) + found.group(3)
    return value


@dataclass(frozen=True, slots=True)
class RateLimit:
    """Both limits are required when the table exists
    (docs/reference/configuration.md#model_providersname)."""

    requests_per_minute: int
    tokens_per_minute: int


@dataclass(frozen=True, slots=True, repr=False)
class ProviderTable:
    """One ``[model_providers.<name>]`` table, split into what rhaipool uses and what the script gets.

    Its ``repr`` is :func:`redacted_table`'s: a table in a log line or a traceback shows no secret.
    """

    name: str
    script: str | None = None
    forwarded: tuple[tuple[str, Any], ...] = ()
    rate_limit: RateLimit | None = None
    serves: tuple[str, ...] | None = None
    egress_allow: tuple[str, ...] = ()
    allowed_hosts: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    allow_env_vars: tuple[str, ...] = ()
    max_response_bytes: int | None = None

    def __repr__(self) -> str:
        return f"ProviderTable({self.name!r}, {redacted_table(self)!r})"

    @property
    def base_url(self) -> str | None:
        """The configured ``base_url``, if a string."""
        value = dict(self.forwarded).get("base_url")
        return value if isinstance(value, str) else None

    def init_config(self, mask: Callable[[str], str] | None = None) -> dict[str, Any]:
        """What ``initialize(config)`` receives: every key but ``script``, ``rate_limit`` and our own.

        With ``mask`` (tenant mode), each secret string (:func:`is_secret_key`) is replaced by
        ``mask(value)``: its placeholder.
        """
        config = {key: _thaw(value) for key, value in self.forwarded}
        return config if mask is None else _masked(config, False, mask)


@dataclass(frozen=True, slots=True)
class ProvidersConfig:
    """Everything the provider runtime reads from the config file."""

    providers_dir: Path = DEFAULT_PROVIDERS_DIR
    providers: tuple[tuple[str, ProviderTable], ...] = ()
    allow_env_vars: tuple[str, ...] = ()
    request_timeout_secs: float = DEFAULT_REQUEST_TIMEOUT_SECS
    retry_attempts: int = DEFAULT_RETRY_ATTEMPTS
    retry_base_ms: int = DEFAULT_RETRY_BASE_MS
    exact_token_counting: bool = False
    model_capabilities: tuple[tuple[str, tuple[tuple[str, Any], ...]], ...] = ()
    tenants: bool = False
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    max_concurrent: tuple[tuple[str, int], ...] = field(default_factory=tuple)
    call_timeout_secs: float = DEFAULT_CALL_TIMEOUT_SECS
    """No provider call runs longer (``request_timeout_secs`` and a stage's timeout are capped by it)."""
    operator_egress: OperatorEgress | None = None
    """The operator's ``[serve.egress]`` policy, applied to every provider on top of its own rule."""
    #: The file this snapshot was read from (or would be, once it exists), its stat stamp then, and a
    #: ``providers_dir`` given on top of it; none of them is part of the snapshot's value.
    source: Path | None = field(default=None, compare=False)
    source_stamp: Any = field(default=None, compare=False)
    dir_override: Path | None = field(default=None, compare=False)

    def table(self, name: str) -> ProviderTable | None:
        """The provider's table, or None when the config names no such provider."""
        return dict(self.providers).get(name)

    def capabilities(self, model: str) -> dict[str, Any]:
        """The ``[model_capabilities.<model>]`` override, possibly empty."""
        return dict(dict(self.model_capabilities).get(model, ()))


def _freeze(value: Any) -> Any:
    """Make TOML values hashable and comparable; datetimes get the reference's private marker.

    Booleans and floats are tagged so that a snapshot compares by type too (Python has 1 == 1.0 == True,
    but a script sees i64, f64 and bool) and so that nan equals itself (an unchanged table must not
    re-run ``initialize``). A tag is a ``(str, x)`` pair; a frozen table is a tuple of pairs, never that.
    """
    if isinstance(value, dict):
        return tuple((k, _freeze(v)) for k, v in value.items())
    if isinstance(value, list):
        return ("__list__", tuple(_freeze(v) for v in value))
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return ((_DATETIME_KEY, value.isoformat()),)
    if isinstance(value, bool):
        return ("__bool__", value)
    if isinstance(value, float):
        return ("__float__", repr(value))
    return value


def _thaw(value: Any) -> Any:
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):
        tag, inner = value
        if tag == "__list__":
            return [_thaw(v) for v in inner]
        if tag == "__bool__":
            return inner
        return float(inner)
    if isinstance(value, tuple):
        return {k: _thaw(v) for k, v in value}
    return value


def _str_list(value: Any, where: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ProviderConfigError(f"{where} must be an array of strings")
    return tuple(value)


def _positive_int(value: Any, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ProviderConfigError(f"{where} must be a positive integer")
    return value


def _rate_limit(raw: Any, name: str) -> RateLimit:
    where = f"[model_providers.{name}.rate_limit]"
    if not isinstance(raw, dict):
        raise ProviderConfigError(f"{where} must be a table")
    for key in ("requests_per_minute", "tokens_per_minute"):
        if key not in raw:
            raise ProviderConfigError(f"{where} requires {key}")
    return RateLimit(
        _positive_int(raw["requests_per_minute"], f"{where} requests_per_minute"),
        _positive_int(raw["tokens_per_minute"], f"{where} tokens_per_minute"),
    )


def _table(name: str, raw: Any) -> ProviderTable:
    where = f"[model_providers.{name}]"
    if not isinstance(raw, dict):
        raise ProviderConfigError(f"{where} must be a table")
    _check_values(raw, where)
    script = raw.get("script")
    if script is not None and not isinstance(script, str):
        raise ProviderConfigError(f"{where} script must be a string")
    env = raw.get("env", {})
    if not isinstance(env, dict) or not all(isinstance(v, str) for v in env.values()):
        raise ProviderConfigError(f"{where} env must be a table of strings")
    cap = raw.get("max_response_bytes")
    return ProviderTable(
        name=name,
        script=script,
        forwarded=tuple((k, _freeze(v)) for k, v in raw.items() if k not in OWN_KEYS),
        rate_limit=_rate_limit(raw["rate_limit"], name) if "rate_limit" in raw else None,
        serves=_str_list(raw["serves"], f"{where} serves") if "serves" in raw else None,
        egress_allow=_str_list(raw.get("egress_allow", []), f"{where} egress_allow"),
        allowed_hosts=_str_list(raw.get("allowed_hosts", []), f"{where} allowed_hosts"),
        env=tuple(env.items()),
        allow_env_vars=_str_list(raw.get("allow_env_vars", []), f"{where} allow_env_vars"),
        max_response_bytes=_positive_int(cap, f"{where} max_response_bytes") if cap is not None else None,
    )


def _check_values(value: Any, where: str) -> None:
    """Only what TOML can hold: a table that came as JSON may carry null, a huge int or a non-string key."""
    if value is None:
        raise ProviderConfigError(f"{where}: null is not a value a provider table can hold")
    if isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise ProviderConfigError(f"{where}: keys must be strings")
            _check_values(item, f"{where} {key}")
    elif isinstance(value, list):
        for item in value:
            _check_values(item, where)
    elif isinstance(value, int) and not isinstance(value, bool) and not _I64[0] <= value <= _I64[1]:
        raise ProviderConfigError(f"{where}: integer out of the 64-bit range")
    elif not isinstance(value, (str, int, float, dt.datetime, dt.date, dt.time)):
        raise ProviderConfigError(f"{where}: unsupported value of type {type(value).__name__}")


def parse_provider_table(
    name: str, raw: dict[str, Any], *, base_dir: Path | None = None, tenant_owned: bool
) -> ProviderTable:
    """One provider table by the rules of a ``[model_providers.<name>]`` table (ProviderConfigError).

    ``tenant_owned``: a tenant's own table (set through the API), which may not name the operator-only
    keys (``egress_allow``, ``allow_env_vars``, ``script``) and whose ``base_url``, when given, must
    be an http(s) URL with a host (in tenant mode it is what the provider may reach). ``base_dir`` is
    where the table was read from, as for :func:`parse_config`; no key of one table is a path
    resolved against it (``script`` is found in ``providers_dir``, or in the script source, at load).
    """
    del base_dir  # parse_config's parameter, accepted for symmetry: nothing in one table depends on it
    where = f"[model_providers.{name}]"
    if not isinstance(raw, dict):
        raise ProviderConfigError(f"{where} must be a table")
    if tenant_owned:
        for key in OPERATOR_ONLY_KEYS:
            if key in raw:
                raise ProviderConfigError(
                    f"{where}: {key!r} may be set only by the operator (in the service's config file), "
                    "not in a tenant's provider table"
                )
        base_url = raw.get("base_url")
        if base_url is not None and (not isinstance(base_url, str) or host_of(base_url) is None):
            raise ProviderConfigError(f"{where} base_url must be an http(s) URL with a host")
    return _table(name, raw)


def redacted_table(table: ProviderTable) -> dict[str, Any]:
    """The table as JSON, every secret value (:func:`is_secret_key` strings, ``env`` values) masked."""
    out: dict[str, Any] = {}
    if table.script is not None:
        out["script"] = table.script
    out.update(_json_safe(table.init_config(lambda _value: REDACTED)))
    if table.rate_limit is not None:
        out["rate_limit"] = {
            "requests_per_minute": table.rate_limit.requests_per_minute,
            "tokens_per_minute": table.rate_limit.tokens_per_minute,
        }
    for key in ("egress_allow", "allowed_hosts", "allow_env_vars"):
        if getattr(table, key):
            out[key] = list(getattr(table, key))
    if table.env:
        out["env"] = {key: REDACTED for key, _ in table.env}
    if table.max_response_bytes is not None:
        out["max_response_bytes"] = table.max_response_bytes
    return out


def _json_safe(value: Any) -> Any:
    """Non-finite floats (TOML has them, JSON has not) as their TOML spelling."""
    if isinstance(value, dict):
        return {k: _json_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_safe(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    return value


def _section(data: dict[str, Any], key: str) -> dict[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, dict):
        raise ProviderConfigError(f"[{key}] must be a table")
    return value


def parse_config(data: dict[str, Any], base_dir: Path | None = None) -> ProvidersConfig:
    """Build a snapshot from parsed TOML; relative ``providers_dir`` is taken from ``base_dir``."""
    tables = _section(data, "model_providers")
    limits = _section(data, "limits")
    pdir = Path(str(data.get("providers_dir", DEFAULT_PROVIDERS_DIR))).expanduser()
    if not pdir.is_absolute() and base_dir is not None:
        pdir = base_dir / pdir
    concurrent = _section(limits, "max_concurrent_inferences_by_provider")
    timeout = data.get("request_timeout_secs", DEFAULT_REQUEST_TIMEOUT_SECS)
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0:
        raise ProviderConfigError("request_timeout_secs must be a positive number")
    cap = data.get("call_timeout_secs", DEFAULT_CALL_TIMEOUT_SECS)
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or not 0 < cap < math.inf:
        raise ProviderConfigError("call_timeout_secs must be a positive number")
    return ProvidersConfig(
        providers_dir=pdir,
        providers=tuple((name, _table(name, raw)) for name, raw in tables.items()),
        allow_env_vars=_str_list(_section(data, "security").get("allow_env_vars", []), "allow_env_vars"),
        request_timeout_secs=float(timeout),
        retry_attempts=_positive_int(limits.get("inference_retry_attempts", 4), "inference_retry_attempts"),
        retry_base_ms=_positive_int(limits.get("inference_retry_base_ms", 1000), "inference_retry_base_ms"),
        exact_token_counting=limits.get("exact_token_counting", False) is True,
        model_capabilities=tuple(
            (model, tuple(caps.items()))
            for model, caps in _section(data, "model_capabilities").items()
            if isinstance(caps, dict)
        ),
        tenants=bool(data.get("tenants")),
        max_response_bytes=_positive_int(
            data.get("max_response_bytes", DEFAULT_MAX_RESPONSE_BYTES), "max_response_bytes"
        ),
        max_concurrent=tuple((k, _positive_int(v, k)) for k, v in concurrent.items()),
        call_timeout_secs=float(cap),
    )


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What changes when the file is edited or replaced; None when it does not exist."""
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def load_config(path: Path | None) -> ProvidersConfig:
    """Read a TOML file; ``None`` means the default path if it exists, else an empty config.

    The snapshot remembers the file (the default path even while it is absent) for :func:`refreshed`.
    """
    if path is None:
        path = DEFAULT_CONFIG_PATH.expanduser()
        if not path.exists():
            return ProvidersConfig(providers_dir=DEFAULT_PROVIDERS_DIR.expanduser(), source=path)
    stamp = _stamp(path)  # before reading, so an edit racing the read is seen by the next check
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise ProviderConfigError(f"cannot read config {path}: {exc}") from exc
    return replace(parse_config(data, base_dir=path.parent), source=path, source_stamp=stamp)


def refreshed(config: ProvidersConfig) -> ProvidersConfig | None:
    """The config re-read from its file when the file changed since ``config`` was read, else None.

    Checked on every provider lookup, like a script's mtime. An edit that does not parse (or a file
    that disappeared) keeps the last good configuration with a warning, the way a broken script never
    takes the daemon down; the next edit is tried again.
    """
    if config.source is None:
        return None
    stamp = _stamp(config.source)
    if stamp == config.source_stamp:
        return None
    try:
        if stamp is None:
            raise ProviderConfigError(f"config {config.source} disappeared")
        new = load_config(config.source)
    except ProviderConfigError as exc:
        log.warning("config reload failed, keeping the last good configuration: %s", exc)
        return replace(config, source_stamp=stamp)
    if config.dir_override is not None:
        new = replace(new, providers_dir=config.dir_override, dir_override=config.dir_override)
    return new


def resolve_script(providers_dir: Path, name: str, override: str | None = None) -> Path | None:
    """Where a provider's script lives; None (with a warning) when the path would escape the directory."""
    if override is not None and Path(override).is_absolute():
        return Path(override)
    value = override if override is not None else name
    if value.endswith(".rhai"):
        value = value[: -len(".rhai")]
    parts = PurePosixPath(value.replace("\\", "/")).parts
    if not parts or ".." in parts or PurePosixPath(value).is_absolute():
        log.warning("script provider path escapes the providers directory - refusing to load (%s)", value)
        return None
    return providers_dir.joinpath(*parts).with_name(parts[-1] + ".rhai")


def candidate_names(config: ProvidersConfig) -> list[str]:
    """Config keys plus ``*.rhai`` stems in the providers directory (an unreadable directory adds none)."""
    names = {name for name, _ in config.providers}
    with contextlib.suppress(OSError):
        names.update(p.stem for p in config.providers_dir.glob("*.rhai") if p.is_file())
    return sorted(names)
