"""Every provider entry point runs as the caller's tenant (issue 10 point 1).

The tenant is observed where the pool records it: on the pool's own error (``CallFailed.tenant``, the
``__cause__`` of the provider error), and in scheduling (``tenant_max_inflight``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from coordinator._core.config import PoolConfig
from coordinator.egress import EgressLimits
from coordinator.errors import CallFailed
from coordinator.providers.failures import ProviderError
from coordinator.providers.loader import ProviderLoadError
from coordinator.providers.runtime import ProviderRuntime

from .harness import Harness

REQ: dict[str, Any] = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
THROWING = """
fn initialize(config) { config }
fn inference(state, request) { throw "inference refused" }
fn stream(state, request, emit) { throw "stream refused" }
fn list_models(state) { throw "listing refused" }
"""


def pool_tenant(error: BaseException) -> str:
    """The tenant the pool ran the failed call as (the first ``CallFailed`` in the cause chain)."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, CallFailed):
        cause = cause.__cause__
    assert cause is not None, f"no pool error behind {error!r}"
    return cause.tenant


@pytest.mark.parametrize("tenant", ["acme", "default"])
def test_inference_stream_and_list_models_run_as_the_tenant(harness: Harness, tenant: str) -> None:
    harness.write("p", THROWING)

    async def body(rt: ProviderRuntime) -> list[str]:
        options = {} if tenant == "default" else {"tenant": tenant}
        seen = []
        with pytest.raises(ProviderError) as inference:
            await rt.inference("p", REQ, **options)
        seen.append(pool_tenant(inference.value))
        items = [item async for item in rt.stream("p", REQ, **options)]
        assert len(items) == 1 and isinstance(items[0], ProviderError)
        seen.append(pool_tenant(items[0]))
        provider = await rt.get("p", **options)
        assert provider.tenant == tenant
        with pytest.raises(ProviderError) as listing:
            await rt.list_models(provider)
        seen.append(pool_tenant(listing.value))
        return seen

    assert harness.run(body) == [tenant] * 3


def test_initialize_runs_as_the_tenant_and_each_tenant_loads_its_own_copy(harness: Harness) -> None:
    harness.write("bad", 'fn initialize(config) { throw "no" }\nfn inference(state, request) { () }\n')
    harness.write("p", THROWING)

    async def body(rt: ProviderRuntime) -> None:
        with pytest.raises(ProviderLoadError) as info:
            await rt.get("bad", tenant="acme")
        assert pool_tenant(info.value) == "acme"
        mine, theirs = await rt.get("p", tenant="acme"), await rt.get("p", tenant="globex")
        assert mine is not theirs and (mine.tenant, theirs.tenant) == ("acme", "globex")
        assert await rt.get("p", tenant="acme") is mine  # cached per tenant

    harness.run(body)


def test_host_log_lines_name_the_tenant(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    harness.write(
        "p",
        "fn initialize(config) { config }\n"
        'fn inference(state, request) { http_get("http://169.254.169.254/latest") }\n',
    )

    async def body(rt: ProviderRuntime) -> None:
        with pytest.raises(ProviderError):
            await rt.inference("p", REQ, tenant="acme")

    with caplog.at_level(logging.INFO, logger="coordinator.providers.host"):
        harness.run(body)
    records = [r for r in caplog.records if "host request failed" in r.getMessage()]
    assert records and all(getattr(r, "tenant", None) == "acme" for r in records)
    assert "tenant acme" in records[0].getMessage()


def test_the_tenant_cap_applies_to_provider_calls(harness: Harness) -> None:
    """With one call per tenant at the workers, a flooding tenant's inferences queue behind each other
    while a second tenant's single inference is placed at once: it finishes before the flood does."""
    harness.write(
        "nap",
        'fn initialize(config) { config }\nfn inference(state, request) { sleep(0.3); #{content: "ok"} }\n',
    )
    finished: list[str] = []

    async def one(rt: ProviderRuntime, tenant: str) -> None:
        await rt.inference("nap", REQ, tenant=tenant)
        finished.append(tenant)

    async def body(rt: ProviderRuntime) -> None:
        await rt.get("nap", tenant="flood")
        await rt.get("nap", tenant="quiet")
        flood = [asyncio.ensure_future(one(rt, "flood")) for _ in range(4)]
        await asyncio.sleep(0.05)  # the flood is queued first
        await one(rt, "quiet")
        await asyncio.gather(*flood)

    harness.run(body, pool_config=PoolConfig(workers=2, spares=0, tenant_max_inflight=1))
    assert finished.index("quiet") < 3, finished  # not behind the whole flood
    assert finished.count("flood") == 4


def test_the_egress_quota_of_one_tenant_leaves_another_alone(harness: Harness) -> None:
    """Each inference's HTTP request counts against its own tenant's egress requests in flight."""
    harness.table("slow", base_url=harness.server.url + "/slow/0.5")
    harness.data["limits"] = {"inference_retry_attempts": 1}
    harness.write(
        "slow",
        "fn initialize(config) { config }\n"
        "fn inference(state, request) { #{content: parse_json(http_get(state.base_url)).text} }\n",
    )

    async def body(rt: ProviderRuntime) -> list[Any]:
        for tenant in ("busy", "quiet"):
            await rt.get("slow", tenant=tenant)
        calls = [rt.inference("slow", REQ, tenant=t) for t in ("busy", "busy", "quiet")]
        return await asyncio.gather(*calls, return_exceptions=True)

    results = harness.run(body, egress_limits=EgressLimits(tenant_requests=1, request_wait=0.1))
    failed = [r for r in results if isinstance(r, ProviderError)]
    assert len(failed) == 1 and "tenant_requests" in failed[0].message and failed[0].transient
    assert results[2].content == "slow answer"  # the quiet tenant's request was never in the way


def test_the_per_tenant_cache_is_bounded_and_an_evicted_provider_just_loads_again(harness: Harness) -> None:
    harness.write(
        "p", 'fn initialize(config) { config }\nfn inference(state, request) { #{content: "ok"} }\n'
    )

    async def body(rt: ProviderRuntime) -> None:
        rt.loader.max_cached = 2
        first = await rt.get("p", tenant="a")
        second = await rt.get("p", tenant="b")
        assert await rt.get("p", tenant="a") is first  # a hit refreshes its place
        await rt.get("p", tenant="c")  # evicts b, the least recently used
        assert len(rt.loader._cache) == 2 and await rt.get("p", tenant="a") is first
        again = await rt.get("p", tenant="b")
        assert again is not second and again.tenant == "b"  # loaded (and initialised) again
        assert (await rt.inference("p", REQ, tenant="b")).content == "ok"

    harness.run(body)
