"""Egress policy: which hosts a provider may call and which addresses it may reach.

Two checks, both on the coordinator side:

* by **name**, before a request: the URL's host must be one the provider is allowed (the host of
  its ``base_url``, of the ``base_url`` its ``initialize`` returned -- not in tenant mode, where only
  the table names hosts --, ``allowed_hosts`` and the names in ``egress_allow``;
  ``allowed_hosts = ["*"]`` allows any host), and pass the operator's ``[serve.egress]`` policy
  (``operator.py``) when one is set;
* by **address**, at connect time, on the address actually connected to (so a name that resolves to
  a private address, or DNS rebinding, cannot reach the inside): anything that is not a global
  unicast address -- loopback, private, link-local, carrier-grade NAT, multicast, unspecified, the
  cloud metadata addresses, deprecated site-local ``fec0::/10`` -- is refused unless ``egress_allow``
  lists the host name, the address or a CIDR range that contains it. An IPv6 form that carries an
  IPv4 address (mapped, translated, compatible, 6to4, NAT64) is judged by the IPv4 address it
  reaches (``coordinator.egress.addresses``).
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from coordinator.egress.addresses import IPAddress, is_site_local, reached_ipv4
from coordinator.egress.errors import EgressDenied
from coordinator.egress.operator import OperatorEgress
from coordinator.egress.secrets import Secrets

__all__ = [
    "METADATA_ADDRESSES",
    "EgressDenied",
    "EgressPolicy",
    "host_of",
]

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

#: Cloud instance-metadata endpoints, refused even though some are not "private" by the RFCs.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in ("169.254.169.254", "169.254.170.2", "100.100.100.200", "192.0.0.192", "fd00:ec2::254")
)


@functools.lru_cache(maxsize=1024)
def host_of(url: str) -> str | None:
    """Lower-case host of an http(s) URL, or None when it has none (remembered: checked per request)."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return None
    return parts.hostname.lower().rstrip(".")


def _parse_allow(entries: tuple[str, ...]) -> tuple[frozenset[str], tuple[IPNetwork, ...]]:
    names, nets = set(), []
    for entry in entries:
        text = entry.strip()
        try:
            nets.append(ipaddress.ip_network(text.strip("[]"), strict=False))
        except ValueError:
            names.add(text.lower().rstrip("."))
    return frozenset(names), tuple(nets)


@dataclass(frozen=True, slots=True)
class EgressPolicy:
    """One provider's egress rules; ``address_key`` identifies the connection pool it may share."""

    provider: str
    hosts: frozenset[str] = frozenset()
    allow_any_host: bool = False
    allow_names: frozenset[str] = frozenset()
    allow_networks: tuple[IPNetwork, ...] = ()
    max_response_bytes: int = 16 * 1024 * 1024
    operator: OperatorEgress | None = None
    """The operator's ``[serve.egress]`` rule, checked on top of this provider's own."""
    secrets: Secrets | None = field(default=None, compare=False)
    """Tenant mode: the provider's secrets, put in place of their placeholders (``secrets.py``)."""
    address_key: tuple[frozenset[str], tuple[IPNetwork, ...]] = field(init=False)
    _bare_hosts: frozenset[str] = field(init=False, repr=False, compare=False)
    """``hosts`` without IPv6 brackets, computed once: ``check_url`` runs on every request."""
    allowed_literals: set[tuple[str, str]] = field(init=False, repr=False, compare=False)
    """(IP-literal host, URL as written) pairs already found allowed (``connect.check_literal``):
    the verdict is a pure function of them and this frozen policy, so it is worked out once."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "address_key", (self.allow_names, self.allow_networks))
        object.__setattr__(self, "_bare_hosts", frozenset(h.strip("[]") for h in self.hosts))
        object.__setattr__(self, "allowed_literals", set())

    @classmethod
    def build(
        cls,
        provider: str,
        *,
        urls: tuple[str | None, ...] = (),
        allowed_hosts: tuple[str, ...] = (),
        egress_allow: tuple[str, ...] = (),
        max_response_bytes: int = 16 * 1024 * 1024,
        operator: OperatorEgress | None = None,
        secrets: Secrets | None = None,
    ) -> EgressPolicy:
        """Derive the policy from base URLs plus configuration."""
        names, nets = _parse_allow(egress_allow)
        hosts = {h for h in (host_of(u) for u in urls if u) if h}
        hosts.update(h.lower().rstrip(".") for h in allowed_hosts if h != "*")
        hosts.update(names)
        hosts.update(str(n.network_address) for n in nets if n.num_addresses == 1)
        return cls(
            provider,
            frozenset(hosts),
            "*" in allowed_hosts,
            names,
            nets,
            max_response_bytes,
            operator,
            secrets,
        )

    def check_url(self, url: str) -> str:
        """Return the URL's host, or raise EgressDenied when this provider may not call it."""
        host = host_of(url)
        if host is None:
            raise EgressDenied(f"egress refused: {url!r} is not an http(s) URL with a host")
        if not self.allow_any_host and host.strip("[]") not in self._bare_hosts:
            raise EgressDenied(
                f"egress refused: host {host!r} is not allowed for provider {self.provider!r} "
                "(allowed: the base_url host, allowed_hosts and egress_allow)"
            )
        if self.operator is not None:
            parts = urlsplit(url)
            try:
                port = parts.port
            except ValueError:
                port = None  # refused as an invalid port before anything is sent
            self.operator.check(self.provider, parts.scheme, host, port)
        return host

    def address_allowed(self, host: str, address: str) -> bool:
        """Whether connecting to ``address`` (resolved from ``host``) is allowed."""
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if host.lower().rstrip(".") in self.allow_names:
            return True
        embedded = reached_ipv4(ip)  # an IPv6 form is judged by every IPv4 address it may reach too
        if self._listed(ip) or (embedded and all(self._listed(c) for c in embedded)):
            return True
        if any(c in METADATA_ADDRESSES for c in (ip, *embedded)):
            return False
        if embedded:
            return all(c.is_global and not c.is_multicast for c in embedded)
        return ip.is_global and not ip.is_multicast and not is_site_local(ip)

    def _listed(self, ip: IPAddress) -> bool:
        return any(ip.version == n.version and ip in n for n in self.allow_networks)

    def check_address(self, host: str, address: str) -> None:
        """Raise EgressDenied for an address the provider may not reach."""
        if not self.address_allowed(host, address):
            raise EgressDenied(
                f"egress refused: {host!r} resolves to {address}, a loopback/private/link-local/metadata "
                f"address; list it in [model_providers.{self.provider}] egress_allow to permit it"
            )
