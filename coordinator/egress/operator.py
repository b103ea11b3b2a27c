"""The operator's egress policy (``[serve.egress]``), applied to every provider on top of its own rule.

    [serve.egress]
    allowed_hosts = ["*.groq.com", "api.openai.com"]   # when given, only hosts matching one of these
    denied_hosts  = ["*.internal.example.com"]         # never these (wins over allowed_hosts)
    allowed_ports = [443]                              # when given, only these ports

Patterns are globs on the lower-case host name as the URL writes it (``*`` any run of characters, dots
included, ``?`` one character): ``*.example.com`` matches ``a.example.com`` and ``a.b.example.com`` but
not ``example.com``. An IP-literal host is matched as text (``127.0.0.1``, ``::1``). The port is the
URL's explicit port, else 80 for http and 443 for https. A request must pass both the provider's own
rule (``policy.py``) and this one; so does each redirect hop (followed only to the same origin).
"""

from __future__ import annotations

import difflib
import fnmatch
from dataclasses import dataclass
from typing import Any

from coordinator.egress.errors import EgressConfigError, EgressDenied

__all__ = ["OperatorEgress", "parse_operator_egress"]

_KEYS = ("allowed_hosts", "denied_hosts", "allowed_ports")
_DEFAULT_PORTS = {"http": 80, "https": 443}


@dataclass(frozen=True, slots=True)
class OperatorEgress:
    """Host patterns and ports the operator allows or denies; empty ``allowed_*`` means no restriction."""

    allowed_hosts: tuple[str, ...] = ()
    denied_hosts: tuple[str, ...] = ()
    allowed_ports: tuple[int, ...] = ()

    def check(self, provider: str, scheme: str, host: str, port: int | None) -> None:
        """Raise EgressDenied when the operator's policy refuses ``host``:``port``."""
        name = host.lower().strip("[]").rstrip(".")
        denied = next((p for p in self.denied_hosts if fnmatch.fnmatchcase(name, p)), None)
        if denied is not None:
            raise EgressDenied(
                f"egress refused: host {host!r} matches {denied!r} in the operator's [serve.egress] "
                f"denied_hosts (provider {provider!r})"
            )
        if self.allowed_hosts and not any(fnmatch.fnmatchcase(name, p) for p in self.allowed_hosts):
            raise EgressDenied(
                f"egress refused: host {host!r} matches none of the operator's [serve.egress] "
                f"allowed_hosts (provider {provider!r})"
            )
        effective = port if port is not None else _DEFAULT_PORTS.get(scheme)
        if self.allowed_ports and effective not in self.allowed_ports:
            raise EgressDenied(
                f"egress refused: port {effective} is not in the operator's [serve.egress] allowed_ports "
                f"{list(self.allowed_ports)} (provider {provider!r})"
            )


def _patterns(raw: dict[str, Any], key: str) -> tuple[str, ...]:
    value = raw.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise EgressConfigError(f"[serve.egress] {key} must be an array of non-empty host patterns")
    patterns = tuple(v.strip().lower().strip("[]").rstrip(".") for v in value)
    for pattern in patterns:
        if any(c.isspace() or c in "/@" for c in pattern):
            raise EgressConfigError(f"[serve.egress] {key}: {pattern!r} is not a host pattern")
    return patterns


def _ports(raw: dict[str, Any]) -> tuple[int, ...]:
    value = raw.get("allowed_ports", [])
    if not isinstance(value, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536 for v in value
    ):
        raise EgressConfigError("[serve.egress] allowed_ports must be an array of ports (1..65535)")
    return tuple(value)


def parse_operator_egress(raw: dict[str, Any]) -> OperatorEgress:
    """Read a ``[serve.egress]`` table; EgressConfigError names the offending key."""
    if not isinstance(raw, dict):
        raise EgressConfigError("[serve.egress] must be a table")
    for key in raw:
        if key not in _KEYS:
            close = difflib.get_close_matches(str(key), _KEYS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f" (known: {', '.join(_KEYS)})"
            raise EgressConfigError(f"[serve.egress] has an unknown key {key!r}{hint}")
    return OperatorEgress(_patterns(raw, "allowed_hosts"), _patterns(raw, "denied_hosts"), _ports(raw))
