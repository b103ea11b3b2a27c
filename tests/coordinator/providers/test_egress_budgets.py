"""Through the whole path (script → worker → host call → egress), what egress holds goes back to zero
when a call ends, however it ends: a stream its consumer abandons, a body too big for the budget."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from coordinator.egress import EgressLimits
from coordinator.providers.errors import ProviderError
from coordinator.providers.response import StreamChunk
from coordinator.providers.runtime import ProviderRuntime

from .harness import Harness

REQ: dict[str, Any] = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
INIT = 'fn initialize(config) { config }\nfn inference(state, request) { #{content: "unused"} }\n'


async def drained(rt: ProviderRuntime) -> dict[str, int]:
    """Egress's holdings once nothing runs (the pool may still be cancelling the call)."""
    assert rt.egress is not None
    for _ in range(500):
        if rt.egress.budgets.in_flight()["requests"] == 0:
            break
        await asyncio.sleep(0.01)
    return rt.egress.budgets.in_flight()


def test_an_abandoned_stream_gives_its_budget_back(harness: Harness) -> None:
    harness.write(
        "p",
        INIT + "fn stream(state, request, on_chunk) { stream_request("
        '`${state.base_url}/sse-slow?n=200&pause=0.02`, "{}", #{}, |c| { on_chunk.call(#{delta: c}); }); }\n',
    )
    harness.table("p", base_url=harness.server.url)

    async def take_two(rt: ProviderRuntime) -> tuple[int, dict[str, int]]:
        taken = 0
        async with contextlib.aclosing(rt.stream("p", REQ, tenant="acme")) as items:
            async for item in items:
                assert isinstance(item, StreamChunk)
                taken += 1
                if taken == 2:
                    break
        return taken, await drained(rt)

    taken, held = harness.run(take_two)
    assert taken == 2 and held == {"response_bytes": 0, "stream_bytes": 0, "requests": 0, "tenants": 0}


def test_a_body_over_the_budget_fails_the_call_with_a_transient_error(harness: Harness) -> None:
    harness.table("p", base_url=harness.server.url + "/big/300000")
    harness.data["limits"] = {"inference_retry_attempts": 1}
    harness.write(
        "p",
        "fn initialize(config) { config }\n"
        "fn inference(state, request) { #{content: http_get(state.base_url)} }\n",
    )

    async def body(rt: ProviderRuntime) -> tuple[ProviderError, dict[str, int]]:
        try:
            await rt.inference("p", REQ)
        except ProviderError as exc:
            return exc, await drained(rt)
        raise AssertionError("the body fit")

    error, held = harness.run(body, egress_limits=EgressLimits(response_bytes=256 * 1024))
    assert error.transient and "EgressLimits.response_bytes" in error.message
    assert held["response_bytes"] == 0 and held["requests"] == 0
