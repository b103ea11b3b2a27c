"""Loading, reloading and caching providers through a real pool
(docs/scripts/providers.md#where-it-lives-and-how-it-is-named, docs/scripts/providers.md#the-functions;
PA1–PA7, PA10, PF1–PF6)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from coordinator.providers.loader import ProviderLoadError, ProviderNotFound
from coordinator.providers.runtime import ProviderRuntime

from .harness import Harness

GOOD = 'fn initialize(config) { #{ v: 1 } }\nfn inference(state, request) { #{ content: "ok" } }\n'
GROQ = (Path(__file__).resolve().parents[3] / "examples" / "providers" / "groq.rhai").read_text()


def load_error(harness: Harness, name: str = "p") -> str:
    async def body(rt: ProviderRuntime) -> str:
        with pytest.raises(ProviderLoadError) as info:
            await rt.get(name)
        assert await rt.lookup(name) is None  # a broken provider is simply absent
        return str(info.value)

    return harness.run(body)


def test_pa1_compile_error(harness: Harness) -> None:
    harness.write("p", "fn inference( { oops")
    assert "compile" in load_error(harness)


def test_pa2_initialize_throw_message(harness: Harness) -> None:
    harness.write(
        "p", 'fn initialize(c) { throw #{message:"no key", transient:false}; }\nfn inference(s, r) { #{} }'
    )
    assert load_error(harness) == "no key"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("fn initialize(config) { #{} }", "p: script must define fn inference(state, request)"),
        ("fn inference(s, r) { #{} }", "p: script must define fn initialize(config)"),
        (
            "fn initialize(config) { #{} }\nfn inference(state) { #{} }",
            "p: fn inference must take 2 parameters (state, request), found 1",
        ),
        (
            "fn initialize() { #{} }\nfn inference(s, r) { #{} }",
            "p: fn initialize must take 1 parameter (config), found 0",
        ),
        (
            "fn initialize(a, b) { #{} }\nfn inference(state) { #{} }",
            "p: fn initialize must take 1 parameter (config), found 2",
        ),
    ],
)
def test_pa3_pa4_missing_and_arity(harness: Harness, source: str, message: str) -> None:
    harness.write("p", source)
    assert load_error(harness) == message


def test_pa6_config_reaches_initialize(harness: Harness) -> None:
    harness.write(
        "p",
        "fn initialize(config) { #{ model: config.model } }\n"
        "fn inference(state, request) { #{ content: state.model } }",
    )
    harness.table("p", model="cfg-model")
    response = harness.run(lambda rt: rt.inference("p", {"model": "m", "messages": []}))
    assert response.content == "cfg-model"


def test_pf7_initialize_sees_only_forwarded_keys(harness: Harness) -> None:
    harness.write(
        "p", "fn initialize(config) { config }\nfn inference(state, request) { #{ content: to_json(state) } }"
    )
    harness.table(
        "p",
        script="p",
        api_key="k",
        base_url="http://api",
        rate_limit={"requests_per_minute": 30, "tokens_per_minute": 1000},
        region="us",
    )
    response = harness.run(lambda rt: rt.inference("p", {"model": "m", "messages": []}))
    assert response.content == '{"api_key":"k","base_url":"http://api","region":"us"}'


def test_pa7_initialize_is_offline(harness: Harness) -> None:
    harness.write(
        "p",
        f'fn initialize(c) {{ http_get("{harness.server.url}/echo"); #{{}} }}\n'
        "fn inference(s, r) { #{} }",
    )
    before = len(harness.server.requests)
    assert "http_get" in load_error(harness)
    assert len(harness.server.requests) == before


def test_initialize_may_read_env_and_helpers(harness: Harness, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PROVIDER_TEST_REGION", "eu")
    harness.write(
        "p",
        'fn initialize(c) { #{ r: env_var("PROVIDER_TEST_REGION"), b: encode_base64("hi"),'
        ' k: env_var("ANTHROPIC_API_KEY") } }\n'
        "fn inference(s, r) { #{ content: `${s.r}|${s.b}|${s.k}` } }",
    )
    monkeypatch.setenv("ANTHROPIC_API_KEY", "secret")
    assert harness.run(lambda rt: rt.inference("p", {"model": "m", "messages": []})).content == "eu|aGk=|"


def test_pa10_groq_example_loads(harness: Harness) -> None:
    harness.write("groq", GROQ)
    harness.table("groq", api_key="test-key")

    async def body(rt: ProviderRuntime) -> Any:
        provider = await rt.get("groq")
        return provider, rt.capabilities(provider, "llama-3.3-70b-versatile")

    provider, caps = harness.run(body)
    assert provider.metadata.provider == "groq"
    assert caps.max_context_tokens == 131072
    assert all(provider.has(fn) for fn in ("stream", "count_tokens", "list_models"))
    assert provider.state["api_key"] == "test-key"


def test_optional_functions_need_their_arity(harness: Harness) -> None:
    harness.write("p", GOOD + "fn stream(s, r) {}\nfn count_tokens(s, t) { 1 }\nfn list_models(s) { [] }\n")
    provider = harness.run(lambda rt: rt.get("p"))
    assert not provider.has("stream") and not provider.has("count_tokens") and provider.has("list_models")


def test_pf1_pf2_cache_and_mtime_reload(harness: Harness) -> None:
    path = harness.write("p", GOOD)

    async def body(rt: ProviderRuntime) -> None:
        first = await rt.get("p")
        assert await rt.get("p") is first
        path.write_text(GOOD.replace('"ok"', '"new"'))
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
        second = await rt.get("p")
        assert second is not first
        assert (await rt.inference("p", {"model": "m", "messages": []})).content == "new"
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns - 5_000_000_000))  # any change, even older
        assert await rt.get("p") is not second

    harness.run(body)


def test_pf3_late_file_and_deleted_file(harness: Harness) -> None:
    async def body(rt: ProviderRuntime) -> None:
        assert await rt.lookup("p") is None
        with pytest.raises(ProviderNotFound):
            await rt.get("p")
        path = harness.write("p", GOOD)
        assert await rt.lookup("p") is not None
        path.unlink()
        assert await rt.lookup("p") is None

    harness.dir.mkdir(parents=True)
    harness.run(body)


def test_pf4_broken_then_fixed(harness: Harness, caplog: pytest.LogCaptureFixture) -> None:
    path = harness.write("p", "fn inference( { oops")

    async def body(rt: ProviderRuntime) -> None:
        assert await rt.lookup("p") is None
        assert await rt.lookup("p") is None  # retried, still broken
        path.write_text(GOOD)
        stat = path.stat()
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
        assert await rt.lookup("p") is not None
        assert await rt.lookup("other") is None

    harness.run(body)
    assert caplog.text.count("script provider load failed") == 2


def test_broken_provider_does_not_affect_others(harness: Harness) -> None:
    harness.write("bad", 'fn initialize(c) { throw "broken" }\nfn inference(s, r) { #{} }')
    harness.write("good", GOOD)

    async def body(rt: ProviderRuntime) -> str:
        assert await rt.lookup("bad") is None
        return (await rt.inference("good", {"model": "m", "messages": []})).content

    assert harness.run(body) == "ok"


def test_pf5_paths_through_the_runtime(harness: Harness) -> None:
    harness.write("vendor/custom", GOOD)
    harness.table("v", script="vendor/custom")
    harness.table("evil", script="../evil")
    (harness.dir.parent / "evil.rhai").write_text(GOOD)

    async def body(rt: ProviderRuntime) -> None:
        assert await rt.lookup("v") is not None
        assert await rt.lookup("evil") is None
        assert await rt.lookup("../evil") is None

    harness.run(body)


def test_pf6_live_config(harness: Harness) -> None:
    harness.write(
        "p",
        "fn initialize(config) { #{ url: config.base_url } }\nfn inference(s, r) { #{} }\n"
        "fn list_models(state) { [#{ id: state.url }] }",
    )
    harness.table("p", base_url="http://first")

    async def body(rt: ProviderRuntime) -> None:
        first = await rt.get("p")
        assert [m.id for m in await rt.list_models(first)] == ["http://first"]
        rt.set_config(harness.config())  # unchanged values, new snapshot object
        assert await rt.get("p") is first
        harness.table("p", base_url="http://second")
        rt.set_config(harness.config())
        second = await rt.get("p")
        assert second is not first
        assert [m.id for m in await rt.list_models(second)] == ["http://second"]

    harness.run(body)


def test_concurrent_first_lookups_share_one_load(harness: Harness) -> None:
    import asyncio

    harness.write("p", GOOD)

    async def body(rt: ProviderRuntime) -> int:
        providers = await asyncio.gather(*(rt.get("p") for _ in range(20)))
        return len({id(p) for p in providers})

    assert harness.run(body) == 1
