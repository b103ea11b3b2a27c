"""Provider behaviour pinned to the reference runtime (Leviath): each case is a difference the provider oracle
found and that is now fixed (issue 12 point 8)."""

from __future__ import annotations

import pytest

from coordinator.providers.errors import InvalidResponse, RequestError
from coordinator.providers.models import Capabilities
from coordinator.providers.request import build_request
from coordinator.providers.response import parse_response

CAPS = Capabilities(max_context_tokens=8192, max_output_tokens=4096)


def test_a_sliding_prefix_cache_hint_reaches_the_script_unchanged() -> None:
    hint = {"SlidingPrefix": {"stable_fraction": 0.5}}
    raw = {
        "model": "m1",
        "system": [{"text": "ctx", "cache_hint": hint, "region": "brain", "volatility": "grows"}],
        "messages": [{"role": "user", "content": "hi"}],
    }
    request = build_request(raw, CAPS)
    assert request["system"] == [{"text": "ctx", "cache_hint": hint, "region": "brain", "volatility": "grows"}]


@pytest.mark.parametrize("block", [{"text": "t", "cache_hint": ["Always"]}, {"text": "t", "volatility": {"a": 1}}])
def test_an_unhashable_hint_or_volatility_is_a_request_error(block: dict[str, object]) -> None:
    with pytest.raises(RequestError):
        build_request({"model": "m1", "system": [block], "messages": []}, CAPS)


@pytest.mark.parametrize(("value", "shown"), [("text", '"text"'), (5, "5"), ([1], "[1]"), (None, "null")])
def test_a_non_map_answer_is_named_in_the_reference_words(value: object, shown: str) -> None:
    with pytest.raises(InvalidResponse) as info:
        parse_response(value)
    assert info.value.message == f"provider script `inference` must return a map, got: {shown}"
