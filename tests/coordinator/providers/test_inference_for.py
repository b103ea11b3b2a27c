"""``ProviderRuntime.inference_for``: the inference of a provider the caller has already looked up.

The reload contract (docs/scripts/providers.md#where-it-lives-and-how-it-is-named: every lookup stats the
script) is the lookup's: ``inference`` looks up, ``inference_for`` uses the provider it is given and does not
look it up a second time.
"""

from __future__ import annotations

import os

import pytest

from coordinator.providers.errors import ProviderNotFound
from coordinator.providers.runtime import ProviderRuntime

from .harness import Harness

REQ = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
SCRIPT = 'fn initialize(config) {{ config }}\nfn inference(state, request) {{ #{{content: "{}"}} }}\n'


def test_inference_for_answers_as_inference_does_without_a_second_lookup(harness: Harness) -> None:
    path = harness.write("p", SCRIPT.format("first"))

    async def body(rt: ProviderRuntime) -> tuple[str, str, str]:
        provider = await rt.get("p")
        looked_up = (await rt.inference("p", REQ)).content
        given = (await rt.inference_for(provider, REQ)).content
        os.remove(path)  # gone: a lookup now finds nothing, the provider in hand still answers
        kept = (await rt.inference_for(provider, REQ)).content
        with pytest.raises(ProviderNotFound):
            await rt.inference("p", REQ)
        return looked_up, given, kept

    assert harness.run(body) == ("first", "first", "first")


def test_an_edited_script_is_picked_up_by_the_next_lookup(harness: Harness) -> None:
    """The rule of docs/scripts/providers.md#where-it-lives-and-how-it-is-named / PF2: any mtime change
    reloads at the next lookup, every time."""
    path = harness.write("p", SCRIPT.format("first"))

    async def body(rt: ProviderRuntime) -> list[str]:
        seen = [(await rt.inference("p", REQ)).content]
        for n, text in enumerate(("second", "third")):
            path.write_text(SCRIPT.format(text))
            stamp = os.stat(path).st_mtime_ns
            os.utime(path, ns=(stamp, stamp + (n + 1) * 1_000_000))  # a different mtime, whatever the clock
            seen.append((await rt.inference("p", REQ)).content)
        return seen

    assert harness.run(body) == ["first", "second", "third"]
