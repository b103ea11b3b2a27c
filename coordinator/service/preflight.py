"""What stops ``rhaipool serve`` after its config parsed: the files it opens as it starts, and grants.

``load_service_config`` reads the file; the service then opens the secrets key file
(:meth:`~coordinator.service.secrets.Sealer.from_key_file`) and, with TLS, the certificate and its key.
:func:`start_problems` opens them the same way, so ``rhaipool serve`` refuses to start on them with one
line each (not a traceback after "listening") and ``rhaipool validate --config`` names them.
:func:`grant_problems` names a grant of a table the operator does not define (``[tenants.<id>]
providers = ["grok"]``): the service would give that tenant nothing under that name and refuse it a
table of its own by it. ``validate`` refuses it; ``serve`` warns and starts (a reload accepts it too).
"""

from __future__ import annotations

import ssl

from coordinator.service.config import ServeConfig
from coordinator.service.errors import ServiceConfigError
from coordinator.service.secrets import Sealer

__all__ = ["grant_problems", "start_problems"]


def start_problems(config: ServeConfig) -> list[str]:
    """One line per file ``config`` names that the service could not open at start."""
    problems = []
    try:
        Sealer.from_key_file(config.secrets_key_file)
    except ServiceConfigError as exc:
        problems.append(str(exc))
    if config.tls_cert is not None and config.tls_key is not None:
        try:
            ssl.create_default_context(ssl.Purpose.CLIENT_AUTH).load_cert_chain(
                config.tls_cert, config.tls_key
            )
        except (OSError, ssl.SSLError) as exc:
            problems.append(
                f"[serve] tls_cert and tls_key: cannot load {config.tls_cert} with {config.tls_key}: "
                f"{getattr(exc, 'strerror', None) or exc}"
            )
    return problems


def grant_problems(config: ServeConfig) -> list[str]:
    """One line per grant of a table the operator does not define (it gives the tenant nothing)."""
    problems = []
    for tenant, granted in sorted(config.grants.items()):
        for name in granted:
            if config.providers.table(name) is None:
                problems.append(
                    f"[tenants.{tenant}] providers: {name!r} is no operator table "
                    f"([model_providers.{name}] is not defined)"
                )
    return problems
