"""What the runtime works out once per configuration snapshot still follows every new snapshot.

Script paths, config keys and model capabilities are remembered per snapshot so that an inference
does not recompute them; these tests change the configuration between inferences and check that the
next inference sees the change.
"""

from __future__ import annotations

from typing import Any

from coordinator.providers.runtime import ProviderRuntime

from .harness import Harness

ECHO_MAX_TOKENS = (
    "fn initialize(config) { #{ tag: config.tag } }\n"
    "fn inference(state, request) { #{ content: `${state.tag}:${request.max_tokens}` } }\n"
)
REQUEST = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_a_new_capabilities_override_reaches_the_next_inference(harness: Harness) -> None:
    harness.write("p", ECHO_MAX_TOKENS)
    harness.table("p", tag="a")
    harness.data["model_capabilities"] = {"m": {"max_output_tokens": 7}}

    async def body(rt: ProviderRuntime) -> list[str]:
        seen = [(await rt.inference("p", REQUEST)).content, (await rt.inference("p", REQUEST)).content]
        harness.data["model_capabilities"] = {"m": {"max_output_tokens": 9}}
        rt.set_config(harness.config())
        seen.append((await rt.inference("p", REQUEST)).content)
        seen.append((await rt.inference("p", {**REQUEST, "model": "other"})).content)
        return seen

    first, again, changed, other = harness.run(body)
    assert (first, again, changed) == ("a:7", "a:7", "a:9")
    assert other != "a:9"  # the override is per model


def test_a_new_script_path_and_table_reach_the_next_lookup(harness: Harness) -> None:
    harness.write("p", ECHO_MAX_TOKENS)
    harness.write("elsewhere", ECHO_MAX_TOKENS.replace("state.tag", '"moved"'))
    harness.table("p", tag="a")

    async def body(rt: ProviderRuntime) -> list[Any]:
        seen = [(await rt.inference("p", {**REQUEST, "max_tokens": 1})).content]
        harness.table("p", tag="b")
        rt.set_config(harness.config())
        seen.append((await rt.inference("p", {**REQUEST, "max_tokens": 1})).content)
        harness.table("p", tag="b", script="elsewhere")
        rt.set_config(harness.config())
        seen.append((await rt.inference("p", {**REQUEST, "max_tokens": 1})).content)
        return seen

    assert harness.run(body) == ["a:1", "b:1", "moved:1"]
