"""``env_var(name)`` resolved by the coordinator, never inside a worker
(docs/scripts/host-functions.md#env_varname).

Single-tenant mode (the default): the provider's ``[model_providers.<name>.env]`` values first, then
the host environment with credential-shaped names hidden unless allow-listed (``[security]
allow_env_vars`` or the provider's own ``allow_env_vars``; case-insensitive, exact). On top of the
reference's list (docs/scripts/host-functions.md#env_varname), names containing ``PASS``, ``PWD``, ``CREDS``,
``_SK``, ``PEM``, ``WEBHOOK`` or ``CONNECTION_STRING`` are hidden, and so is a ``*_URI``/``*_URL`` variable,
or any name ending in ``PROXY`` (``HTTPS_PROXY``, ``all_proxy``, ``NO_PROXY``...), whose value carries
``user:password@``. Tenant mode: only the provider's ``env`` table and the host variables its own
``allow_env_vars`` names, and the script gets each value's placeholder, never the value (``secrets.py``).
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from coordinator.egress.secrets import SecretMisuse, Secrets

__all__ = ["EnvResolver", "carries_password", "is_credential_shaped"]

log = logging.getLogger(__name__)

_CONTAINS = (
    "TOKEN",
    "SECRET",
    "PASSWORD",
    "PASSWD",
    "PASSPHRASE",
    "CREDENTIAL",
    "APIKEY",
    "API_KEY",
    "ACCESS_KEY",
    "PRIVATE_KEY",
    "KEY",
    "_PAT",
    "SESSION",
    "COOKIE",
    "AUTH",
    "BEARER",
    "SIGNATURE",
    "SIGNING",
    "DSN",
    "NETRC",
    "KUBECONFIG",
    "PASS",
    "PWD",
    "CREDS",
    "_SK",
    "PEM",
    "WEBHOOK",
    "CONNECTION_STRING",
)
_EQUALS = frozenset(
    {"DATABASE_URL", "DATABASE_DSN", "REDIS_URL", "MONGO_URL", "MONGODB_URI", "AMQP_URL", "SSH_AUTH_SOCK"}
)
_PREFIXES = ("LEVIATH_", "RHAIPOOL_", "AWS_", "AZURE_", "GOOGLE_", "GCP_")


#: ``user:password@`` in a URL's authority (``scheme://`` optional, the user may be empty).
_USERINFO_PASSWORD = re.compile(r"(?:^|://)[^/?#@\s]*:[^/?#@\s]*@")


def is_credential_shaped(name: str) -> bool:
    """Whether a variable name looks like it holds a secret."""
    upper = name.upper()
    return upper in _EQUALS or upper.startswith(_PREFIXES) or any(part in upper for part in _CONTAINS)


def carries_password(name: str, value: str) -> bool:
    """A ``*_URI``/``*_URL`` or ``*PROXY`` variable whose value embeds ``user:password@``."""
    upper = name.upper()
    is_url_name = upper in ("URI", "URL") or "_URI" in upper or "_URL" in upper or upper.endswith("PROXY")
    return is_url_name and _USERINFO_PASSWORD.search(value) is not None


@dataclass(frozen=True, slots=True)
class EnvResolver:
    """One provider's view of environment variables."""

    provider: str
    configured: tuple[tuple[str, str], ...] = field(default=(), repr=False)  # secret values, never shown
    allow: frozenset[str] = frozenset()
    tenant_mode: bool = False
    environ: Mapping[str, str] | None = None
    secrets: Secrets | None = None
    """Tenant mode: every value found is handed out as its placeholder (``secrets.py``)."""

    @classmethod
    def build(
        cls,
        provider: str,
        *,
        configured: tuple[tuple[str, str], ...] = (),
        allow: tuple[str, ...] = (),
        tenant_mode: bool = False,
        environ: Mapping[str, str] | None = None,
        secrets: Secrets | None = None,
    ) -> EnvResolver:
        """Normalise the allow-list to upper case."""
        return cls(provider, configured, frozenset(a.upper() for a in allow), tenant_mode, environ, secrets)

    def get(self, name: object) -> str | None:
        """The value the script sees, or None for ``()``."""
        if not isinstance(name, str):
            return None
        if self.tenant_mode:
            value = self._tenant_value(name)
            if not value or self.secrets is None:
                return value
            try:
                return self.secrets.placeholder(value)
            except SecretMisuse as exc:  # too many distinct values: this one stays out of reach
                log.warning("provider %s: env_var(%r) hidden: %s", self.provider, name, exc)
                return None
        values = dict(self.configured)
        if name in values:
            return values[name]
        environ = os.environ if self.environ is None else self.environ
        if name.upper() in self.allow:
            return environ.get(name)
        value = environ.get(name)
        if is_credential_shaped(name) or (value is not None and carries_password(name, value)):
            if value is not None:
                log.warning(
                    "provider %s: env_var(%r) hidden: credential-shaped names need allow_env_vars",
                    self.provider,
                    name,
                )
            return None
        return value

    def _tenant_value(self, name: str) -> str | None:
        values = dict(self.configured)
        if name in values:
            return values[name]
        environ = os.environ if self.environ is None else self.environ
        return environ.get(name) if name.upper() in self.allow else None
