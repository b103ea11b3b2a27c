"""The shared client keeps connections alive: steady traffic opens about as many as it has callers.

Counted at a real loopback server (the stand-in counts every connection it accepts).
"""

from __future__ import annotations

import asyncio

from coordinator.bench.standin import StandinServer
from coordinator.egress import Egress, EgressPolicy
from coordinator.egress.budgets import EgressLimits

POLICY = EgressPolicy.build("local", egress_allow=("127.0.0.1",), max_response_bytes=1 << 20)
OTHER = EgressPolicy.build("other", egress_allow=("127.0.0.1", "10.0.0.1"), max_response_bytes=1 << 20)


async def _callers(egress: Egress, url: str, callers: int, each: int, policy: EgressPolicy = POLICY) -> None:
    async def caller() -> None:
        for _ in range(each):
            await egress.fetch(policy, "GET", url)

    await asyncio.gather(*(caller() for _ in range(callers)))


def test_one_caller_at_a_time_uses_one_connection() -> None:
    with StandinServer() as server:

        async def main() -> None:
            async with Egress() as egress:
                await _callers(egress, server.base_url + "/models", callers=1, each=40)

        asyncio.run(main())
        assert server.requests_served == 40
        assert server.connections_accepted == 1


def test_steady_concurrent_callers_reuse_their_connections() -> None:
    """64 callers, 8 calls each, answers after 20 ms: no more connections than callers at once."""
    with StandinServer(delay=0.02) as server:

        async def main() -> None:
            async with Egress(limits=EgressLimits(tenant_requests=None)) as egress:
                await _callers(egress, server.base_url + "/models", callers=64, each=8)

        asyncio.run(main())
        assert server.requests_served == 64 * 8
        assert server.connections_accepted <= 64


def test_policies_never_share_a_connection() -> None:
    """A connection opened under one address policy is not reused under another."""
    with StandinServer() as server:

        async def main() -> None:
            async with Egress() as egress:
                await _callers(egress, server.base_url + "/models", callers=1, each=5)
                await _callers(egress, server.base_url + "/models", callers=1, each=5, policy=OTHER)

        asyncio.run(main())
        assert server.connections_accepted == 2
