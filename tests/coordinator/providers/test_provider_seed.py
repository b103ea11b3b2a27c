"""Audit of what the seed (custom-model-providers) promises script authors, beyond the numbered cases.

Each test pins one place where the implementation used to differ from the seed's prose; scripts run in
real workers against the real pool, and config files are real files on disk.
"""

from __future__ import annotations

import logging
import math
import os
import tomllib
from pathlib import Path
from typing import Any

import pytest

from coordinator.providers.config import load_config, parse_config
from coordinator.providers.loader import ProviderLoadError
from coordinator.providers.runtime import ProviderRuntime
from coordinator.providers.session import read_config, validate_provider

from .harness import Harness

REQ: dict[str, Any] = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}
GOOD = 'fn initialize(config) { #{} }\nfn inference(state, request) { #{content: "ok"} }\n'
#: Answers with what initialize saw, through list_models (no network needed).
ECHO = (
    'fn initialize(config) { #{ url: config.base_url ?? "none", t: type_of(config.x), x: config.x } }\n'
    "fn inference(state, request) { #{ content: state.url } }\n"
    "fn list_models(state) { [#{ id: state.url, display_name: `${state.t}:${state.x}` }] }\n"
)


def _bump(path: Path) -> None:
    """Give an edited file a clearly different mtime, whatever the filesystem's timestamp granularity."""
    stat = path.stat()
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))


# -- "A broken script is skipped, not fatal. It logs a warning" -------------------------------------


@pytest.mark.parametrize(
    "source",
    ["fn inference( { oops", "fn initialize(config) { #{} }\nfn inference(state) { #{} }\n"],
    ids=["syntax", "arity"],
)
def test_broken_script_used_for_inference_logs_a_warning(
    harness: Harness, caplog: pytest.LogCaptureFixture, source: str
) -> None:
    """The warning must not depend on which entry point asked: inference() logs it too, once per load."""
    harness.write("p", source)

    async def body(rt: ProviderRuntime) -> None:
        with pytest.raises(ProviderLoadError):
            await rt.inference("p", REQ)

    with caplog.at_level(logging.WARNING):
        harness.run(body)
    assert caplog.text.count("script provider load failed") == 1


# -- "Its [model_providers.<name>] table is read the same way ... needs no restart either" ------------


def test_config_file_edit_reaches_initialize_without_restart(
    harness: Harness, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A runtime built from a config file sees an edited base_url on the next use; a broken edit keeps the
    last good configuration (with a warning) and fixing it applies."""
    harness.write("p", ECHO)
    cfg = tmp_path / "config.toml"

    def write(url: str, extra: str = "") -> None:
        cfg.write_text(f'providers_dir = "{harness.dir}"\n[model_providers.p]\nbase_url = "{url}"\n{extra}')
        _bump(cfg)

    write("http://first")

    async def body(rt: ProviderRuntime) -> list[str]:
        rt.set_config(load_config(cfg))
        seen = [(await rt.inference("p", REQ)).content]
        write("http://second")
        seen.append((await rt.inference("p", REQ)).content)
        cfg.write_text("not = [toml")
        _bump(cfg)
        seen.append((await rt.inference("p", REQ)).content)
        seen.append((await rt.inference("p", REQ)).content)
        write("http://third")
        seen.append((await rt.inference("p", REQ)).content)
        return seen

    with caplog.at_level(logging.WARNING):
        assert harness.run(body) == [
            "http://first",
            "http://second",
            "http://second",
            "http://second",
            "http://third",
        ]
    assert caplog.text.count("config reload failed") == 1  # once per broken edit, not per lookup


def test_config_file_created_later_is_picked_up(
    harness: Harness, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "A config table is optional": a runtime started with no config file sees one written later."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    harness.write("p", ECHO)

    async def body(rt: ProviderRuntime) -> list[str]:
        rt.set_config(read_config(None, harness.dir))
        seen = [(await rt.inference("p", REQ)).content]
        path = home / ".rhaipool" / "config.toml"
        path.parent.mkdir()
        path.write_text('[model_providers.p]\nbase_url = "http://later"\n')
        seen.append((await rt.inference("p", REQ)).content)
        return seen

    assert harness.run(body) == ["none", "http://later"]


def test_config_value_type_change_reloads(harness: Harness) -> None:
    """Values forwarded "verbatim": 1 -> 1.0 -> true are different configs (Python's 1 == 1.0 == True)."""
    harness.write("p", ECHO)

    async def body(rt: ProviderRuntime) -> list[str]:
        seen = []
        for value in (1, 1.0, True):
            harness.table("p", x=value)
            rt.set_config(harness.config())
            provider = await rt.get("p")
            seen.append((await rt.list_models(provider))[0].display_name)
        return seen

    assert harness.run(body) == ["i64:1", "f64:1.0", "bool:true"]


def test_nan_config_value_keeps_the_cached_provider(harness: Harness) -> None:
    """An unchanged table (even one holding nan, which is never == itself) must not re-run initialize."""
    harness.write("p", ECHO)
    text = f'providers_dir = "{harness.dir}"\n[model_providers.p]\nx = nan\n'

    async def body(rt: ProviderRuntime) -> bool:
        rt.set_config(parse_config(tomllib.loads(text)))  # as a config pass re-reads the file
        first = await rt.get("p")
        rt.set_config(parse_config(tomllib.loads(text)))
        return await rt.get("p") is first

    assert harness.run(body)
    table = parse_config(tomllib.loads(text)).table("p")
    assert table is not None and math.isnan(table.init_config()["x"])


# -- "lev validate says whether each script provider ... defines count_tokens" (optional functions) ---


def test_validate_lists_only_optional_functions_with_their_arity(harness: Harness) -> None:
    """A wrong-arity stream/count_tokens is absent (docs/scripts/providers.md#the-functions): validate must
    not call it present."""
    path = harness.write(
        "p", GOOD + "fn stream(s, r) {}\nfn count_tokens(s, t) { 1 }\nfn list_models(s) { [] }\n"
    )

    async def body(rt: ProviderRuntime) -> str:
        return (await validate_provider(path, rt.executor.pool)).describe(path)

    text = harness.run(body)
    assert "optional: list_models;" in text and "no count_tokens" in text
