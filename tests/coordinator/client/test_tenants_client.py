"""The tenants methods of ``coordinator.client`` (async and sync) against a real service: a tenant added
with a token's sha256 signs in with that token, and is refused once deleted."""

from __future__ import annotations

import asyncio
import hashlib

from service_support import ADMIN, ServiceProcess

from coordinator.client import AsyncClient, Client, ServiceError


def _status_of_listing(url: str, token: str) -> int:
    with Client(url, token) as c:
        try:
            c.list_scripts()
        except ServiceError as exc:
            return exc.status
    return 200


def test_async_put_and_delete_tenant(service: ServiceProcess) -> None:
    token = "a-token-made-by-the-test"

    async def scenario() -> list[str]:
        async with AsyncClient(service.url, ADMIN) as admin:
            await admin.put_tenant("async-co", hashlib.sha256(token.encode()).hexdigest())
            listed = await admin.list_tenants()
        return [t if isinstance(t, str) else t["id"] for t in listed["tenants"]]

    assert "async-co" in asyncio.run(scenario())
    assert _status_of_listing(service.url, token) == 200
    with Client(service.url, ADMIN) as admin:
        assert admin.delete_tenant("async-co") is None
    assert _status_of_listing(service.url, token) == 401


def test_tenant_names_travel_as_one_path_segment(service: ServiceProcess) -> None:
    with Client(service.url, ADMIN) as admin:
        try:
            admin.delete_tenant("../reload")
        except ServiceError as exc:
            assert exc.status in (400, 404), exc
        else:
            raise AssertionError("a tenant id with a slash named something")
