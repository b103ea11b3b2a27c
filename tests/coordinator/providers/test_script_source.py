"""Provider scripts from a script source (the service's database) instead of files (contracts: "Scripts
come from the database"): a cached provider is reused while (version, configuration) is unchanged."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from coordinator.providers import ScriptSource
from coordinator.providers.executor import PoolExecutor
from coordinator.providers.loader import ProviderLoadError, ProviderNotFound
from coordinator.providers.runtime import ProviderRuntime

from .harness import Harness

REQ: dict[str, Any] = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}


def script(answer: str) -> str:
    return (
        f'fn initialize(config) {{ #{{}} }}\nfn inference(state, request) {{ #{{ content: "{answer}" }} }}\n'
    )


class Scripts:
    """Scripts in memory, versioned by sha256, counting reads."""

    def __init__(self) -> None:
        self.texts: dict[str, str] = {}
        self.reads: list[str] = []

    def put(self, name: str, text: str) -> None:
        self.texts[name] = text

    def version(self, name: str) -> str | None:
        text = self.texts.get(name)
        return None if text is None else hashlib.sha256(text.encode()).hexdigest()

    async def read(self, name: str) -> str | None:
        self.reads.append(name)
        return self.texts.get(name)


def test_scripts_come_from_the_source_and_reload_only_when_their_version_changes(harness: Harness) -> None:
    scripts = Scripts()
    scripts.put("p", script("one"))
    harness.write("p", script("from a file"))  # never read: the source wins
    assert isinstance(scripts, ScriptSource)

    async def body(rt: ProviderRuntime) -> list[str]:
        runtime = ProviderRuntime(rt.executor, rt.egress, rt.config, source=scripts)
        seen = [(await runtime.inference("p", REQ)).content, (await runtime.inference("p", REQ)).content]
        first = await runtime.get("p")
        scripts.put("p", script("two"))
        seen.append((await runtime.inference("p", REQ)).content)
        assert (await runtime.get("p")) is not first and (await runtime.get("p")).version == scripts.version(
            "p"
        )
        del scripts.texts["p"]
        with pytest.raises(ProviderNotFound):
            await runtime.get("p")
        return seen

    assert harness.run(body) == ["one", "one", "two"]
    assert scripts.reads == ["p", "p"]  # one read per version


def test_a_script_gone_between_version_and_read_is_not_found(harness: Harness) -> None:
    class Vanishing(Scripts):
        async def read(self, name: str) -> str | None:
            return None

    scripts = Vanishing()
    scripts.put("p", script("x"))

    async def body(rt: ProviderRuntime) -> None:
        runtime = ProviderRuntime(PoolExecutor(rt.executor.pool), rt.egress, rt.config, source=scripts)
        with pytest.raises(ProviderNotFound, match="no provider script p"):
            await runtime.get("p")

    harness.run(body)


def test_a_source_that_fails_to_read_fails_the_load_not_the_caller(harness: Harness) -> None:
    class Broken(Scripts):
        async def read(self, name: str) -> str | None:
            raise OSError("disk I/O error")

    scripts = Broken()
    scripts.put("p", script("x"))

    async def body(rt: ProviderRuntime) -> None:
        runtime = ProviderRuntime(rt.executor, rt.egress, rt.config, source=scripts)
        with pytest.raises(ProviderLoadError, match="disk I/O error"):
            await runtime.get("p")
        assert await runtime.lookup("p") is None  # a broken provider is just absent

    harness.run(body)
