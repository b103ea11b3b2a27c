"""The connection path of egress: where the address policy is applied
(docs/scripts/host-functions.md#transport, SECURITY.md layer 6).

aiohttp asks a connector's resolver for the addresses of a host name and dials only what it returns,
so each address policy's connector gets a ``PolicyResolver`` that resolves the name and keeps only
the addresses the policy allows: a name resolving to a private address, or DNS rebinding between
check and connect, cannot reach the inside. aiohttp never consults the resolver for an IP-literal
host (and itself refuses legacy numeric forms such as ``127.1``), so ``check_literal`` judges those
before every hop. Sockets get TCP keepalive probes after 30 s idle.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from typing import Any
from urllib.parse import urlsplit

from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.helpers import is_ip_address
from yarl import URL

from coordinator.egress.errors import DnsFailure, NoAllowedAddress
from coordinator.egress.policy import EgressDenied, EgressPolicy

__all__ = ["KEEPALIVE_IDLE_SECS", "NoAllowedAddress", "PolicyResolver", "check_literal", "keepalive_socket"]

KEEPALIVE_IDLE_SECS = 30
_MAX_REMEMBERED = 256
"""Allowed IP-literal URLs remembered per policy (``check_literal``): each is judged once, not per hop."""


class PolicyResolver(AbstractResolver):
    """Resolves a name and returns only the addresses its policy allows, so nothing else is dialled."""

    def __init__(self, policy: EgressPolicy) -> None:
        self._policy = policy

    async def resolve(
        self, host: str, port: int = 0, family: socket.AddressFamily = socket.AF_UNSPEC
    ) -> list[ResolveResult]:
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(
                host, port, type=socket.SOCK_STREAM, family=family
            )
        except socket.gaierror as exc:
            raise DnsFailure(f"dns error: failed to lookup address for {host}: {exc}") from exc
        results: list[ResolveResult] = []
        for fam, _, proto, _, sockaddr in infos:
            address = str(sockaddr[0])
            if self._policy.address_allowed(host, address) and all(r["host"] != address for r in results):
                results.append(
                    ResolveResult(
                        hostname=host,
                        host=address,
                        port=port,
                        family=fam,
                        proto=proto,
                        flags=socket.AI_NUMERICHOST | socket.AI_NUMERICSERV,
                    )
                )
        if not results:
            raise NoAllowedAddress(host, str(infos[0][4][0]))
        return results

    async def close(self) -> None:
        """Nothing held."""


def keepalive_socket(addr_info: Any) -> socket.socket:
    """A TCP socket with keepalive probes after 30 s idle (docs/scripts/host-functions.md#transport)."""
    family, kind, proto, _, _ = addr_info
    sock = socket.socket(family=family, type=kind, proto=proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_KEEPIDLE"):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, KEEPALIVE_IDLE_SECS)
    return sock


def check_literal(policy: EgressPolicy, url: URL, written: str) -> None:
    """An IP-literal host skips the connector's resolver, so its address is judged here.

    Messages name the host as ``written`` (``::ffff:127.0.0.1``, not yarl's normalised form).
    """
    host = url.raw_host or ""
    if (host, written) in policy.allowed_literals or not is_ip_address(host):
        return
    shown = (urlsplit(written).hostname or host).lower()
    try:
        address = str(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        raise EgressDenied(f"egress refused: {shown!r} is not a canonical IP address") from None
    policy.check_address(shown, address)
    if len(policy.allowed_literals) >= _MAX_REMEMBERED:  # a script writing ever new URLs stays bounded
        policy.allowed_literals.clear()
    policy.allowed_literals.add((host, written))
