"""Provider behaviour pinned to the reference runtime (Leviath): each case is a difference the provider oracle
found and that is now fixed (issue 12 point 8)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from coordinator.providers.errors import InvalidProviderRequest, InvalidResponse
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
    assert request["system"] == [
        {"text": "ctx", "cache_hint": hint, "region": "brain", "volatility": "grows"}
    ]


@pytest.mark.parametrize(
    "block", [{"text": "t", "cache_hint": ["Always"]}, {"text": "t", "volatility": {"a": 1}}]
)
def test_an_unhashable_hint_or_volatility_is_a_request_error(block: dict[str, object]) -> None:
    with pytest.raises(InvalidProviderRequest):
        build_request({"model": "m1", "system": [block], "messages": []}, CAPS)


@pytest.mark.parametrize(("value", "shown"), [("text", '"text"'), (5, "5"), ([1], "[1]"), (None, "null")])
def test_a_non_map_answer_is_named_in_the_reference_words(value: object, shown: str) -> None:
    with pytest.raises(InvalidResponse) as info:
        parse_response(value)
    assert info.value.message == f"provider script `inference` must return a map, got: {shown}"


def test_a_compile_error_names_its_position_as_the_reference_does(tmp_path: Path) -> None:
    """The reference's provider load error is Rhai's text with ``(line L, position C)``; rhaipool lost it."""
    from coordinator import Pool
    from coordinator.providers.config import parse_config
    from coordinator.providers.errors import ProviderLoadError
    from coordinator.providers.executor import PoolExecutor
    from coordinator.providers.runtime import ProviderRuntime

    (tmp_path / "broken.rhai").write_text("fn initialize(config) { #{} \n")

    async def main() -> str:
        async with Pool(workers=1) as pool:
            runtime = ProviderRuntime(
                PoolExecutor(pool), None, parse_config({"providers_dir": str(tmp_path)})
            )
            with pytest.raises(ProviderLoadError) as info:
                await runtime.get("broken")
            return str(info.value)

    assert asyncio.run(main()) == (
        "compile provider script broken: Expecting ';' to terminate this statement (line 2, position 1)"
    )
