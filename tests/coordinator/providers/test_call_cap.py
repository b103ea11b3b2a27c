"""Every provider call ends by its wall-clock cap, whatever request_timeout_secs says (issue 22 point 6).

The upstream (the stand-in on 127.0.0.1) answers ``/slow/<s>`` after s seconds; the scripts run in
real workers. ``request_timeout_secs`` is 900 s, so only the cap can end these calls this soon.
"""

from __future__ import annotations

import time
from typing import Any

import pytest

from coordinator.providers.errors import ProviderCallTimeout, RequestFailed
from coordinator.providers.failures import ProviderError
from coordinator.providers.runtime import ProviderRuntime

from .harness import Harness

CAP = 1.5
#: Generous: the machine is shared; the point is "about the cap", not the 900 s request timeout.
MARGIN = 6.0
REQ: dict[str, Any] = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
SLOW = """
fn initialize(config) { config }
fn inference(state, request) { #{ content: http_get(`${state.base_url}/slow/30`, #{}) } }
fn stream(state, request, emit) { emit.call(#{ delta: http_get(`${state.base_url}/slow/30`, #{}) }); }
fn list_models(state) { parse_json(http_get(`${state.base_url}/slow/30`, #{})) }
"""


def capped(harness: Harness) -> None:
    harness.data["request_timeout_secs"] = 900
    harness.data["call_timeout_secs"] = CAP
    harness.data["limits"] = {"inference_retry_attempts": 4, "inference_retry_base_ms": 10}
    harness.table("p", base_url=harness.server.url)
    harness.write("p", SLOW)


def test_inference_stream_and_list_models_end_by_the_cap(harness: Harness) -> None:
    capped(harness)

    async def body(rt: ProviderRuntime) -> list[tuple[str, float, ProviderError]]:
        provider = await rt.get("p")
        seen: list[tuple[str, float, ProviderError]] = []
        start = time.monotonic()
        with pytest.raises(ProviderError) as inference:
            await rt.inference("p", REQ)
        seen.append(("inference", time.monotonic() - start, inference.value))
        start = time.monotonic()
        items = [item async for item in rt.stream("p", REQ)]
        assert len(items) == 1 and isinstance(items[0], ProviderError), items
        seen.append(("stream", time.monotonic() - start, items[0]))
        start = time.monotonic()
        with pytest.raises(ProviderError) as listing:
            await rt.list_models(provider)
        seen.append(("list_models", time.monotonic() - start, listing.value))
        return seen

    for what, took, error in harness.run(body, timeout=120):
        assert took < CAP + MARGIN, f"{what} took {took:.1f}s"
        assert isinstance(error, ProviderCallTimeout), f"{what}: {error!r}"
        assert isinstance(error, RequestFailed) and error.transient
        assert f"exceeded its {CAP:g}s wall-clock cap (call_timeout_secs)" in error.message


def test_the_cap_must_be_a_positive_number(harness: Harness) -> None:
    from coordinator.providers.config import ProviderConfigError, parse_config

    for bad in (0, -1, "10", True, float("inf")):
        with pytest.raises(ProviderConfigError, match="call_timeout_secs"):
            parse_config({"call_timeout_secs": bad})
    assert parse_config({}).call_timeout_secs == 120.0
