"""The shared client keeps no cookies: a Set-Cookie for one provider never rides on a later request.

The reference's HTTP client has no cookie store; ours is one client for every provider and tenant,
so a stored cookie would cross the tenant boundary.
"""

from __future__ import annotations

import asyncio

from coordinator.bench.standin import Reply, StandinServer
from coordinator.egress import Egress, EgressPolicy

A = EgressPolicy.build("a", egress_allow=("127.0.0.1",), max_response_bytes=1 << 20)
B = EgressPolicy.build("b", egress_allow=("127.0.0.1",), max_response_bytes=1 << 20)


def test_a_cookie_set_for_one_provider_is_not_sent_for_any() -> None:
    with StandinServer() as server:
        server.route("GET", "/set", lambda r: Reply(200, {"Set-Cookie": "session=tenant-a; Path=/"}, b"ok"))
        server.route("GET", "/show", lambda r: Reply(200, {}, r.headers.get("cookie", "<none>").encode()))

        async def main() -> tuple[str, str]:
            async with Egress() as egress:
                await egress.fetch(A, "GET", server.url + "/set", tenant="a")
                same = await egress.fetch(A, "GET", server.url + "/show", tenant="a")
                other = await egress.fetch(B, "GET", server.url + "/show", tenant="b")
                return same, other

        assert asyncio.run(main()) == ("<none>", "<none>")
