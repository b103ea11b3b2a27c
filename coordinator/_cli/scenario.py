"""``rhaipool test``: replay a scenario against one custom region (SPEC §4.1).

A scenario is checked completely before anything runs, so a typo in step 7
is reported as such instead of after six steps of script calls.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from coordinator._cli.errors import ScenarioError
from coordinator.regions.assembly import AssembledRequest, assemble
from coordinator.regions.hooks import RenderMeta
from coordinator.regions.loading import DEFAULT_HOOK_TIMEOUT, RegionLoader, RegionPool
from coordinator.regions.model import ENTRY_KINDS, VOLATILITIES, Entry, ToolCall
from coordinator.regions.reports import RenderReport
from coordinator.regions.runtime import Region
from coordinator.regions.tokens import estimate_tokens

__all__ = ["Scenario", "ScenarioError", "ScenarioResult", "load_scenario", "run_scenario"]

_OPS: Final = ("write", "render", "evict", "replace")


@dataclass(frozen=True, slots=True)
class Scenario:
    """A parsed scenario: the script, the region's declaration, render meta and steps."""

    path: Path
    script: Path
    name: str
    budget: int
    persistent: bool = False
    admission: str = "evict"
    volatility: str = "rewritten"
    meta: Mapping[str, Any] = field(default_factory=dict)
    steps: tuple[tuple[str, Mapping[str, Any]], ...] = ()


@dataclass(frozen=True, slots=True)
class ScenarioResult:
    """Step reports (§4.1 shapes), final entries, and what the model saw at each render."""

    scenario: Scenario
    script_sha256: str
    steps: list[dict[str, Any]]
    entries: list[dict[str, Any]]
    requests: dict[int, AssembledRequest]

    def to_json(self) -> dict[str, Any]:
        """``{"steps": [...], "entries": [...]}`` exactly as §4.1 defines it."""
        return {"steps": self.steps, "entries": self.entries}


def _need(cond: bool, where: str, message: str) -> None:
    if not cond:
        raise ScenarioError(f"{where}: {message}")


_INT_MAX: Final = 2**63 - 1
"""Rhai's ``INT`` is i64: a larger number cannot reach a script, so it is a scenario error, not a fallback."""


_INT_TEXT: Final = "a non-negative integer (at most 2^63-1)"


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _INT_MAX


def load_scenario(path: str | Path) -> Scenario:
    """Read and validate a scenario file; raises ``ScenarioError`` naming what is wrong."""
    path = Path(path)
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ScenarioError(f"{path}: cannot read scenario: {exc}") from exc
    _need(isinstance(raw, dict), str(path), "a scenario is a JSON object")
    _need(
        isinstance(raw.get("script"), str) and raw["script"].strip() != "",
        "script",
        "a non-empty path is required",
    )
    region = raw.get("region")
    _need(isinstance(region, dict), "region", "an object with name and budget is required")
    _need(
        isinstance(region.get("name"), str) and region["name"] != "",
        "region.name",
        "a non-empty string is required",
    )
    _need(_is_int(region.get("budget")), "region.budget", _INT_TEXT)
    _need(isinstance(region.get("persistent", False), bool), "region.persistent", "must be true or false")
    _need(
        region.get("admission", "evict") in ("evict", "reject"),
        "region.admission",
        'must be "evict" or "reject"',
    )
    _need(
        region.get("volatility", "rewritten") in VOLATILITIES,
        "region.volatility",
        "stable, grows or rewritten",
    )
    meta = raw.get("meta", {})
    _need(isinstance(meta, dict), "meta", "must be an object")
    _check_meta(meta, "meta")
    steps = raw.get("steps", [])
    _need(isinstance(steps, list), "steps", "must be an array")
    return Scenario(
        path=path,
        script=(path.parent / raw["script"].strip()),
        name=region["name"],
        budget=region["budget"],
        persistent=region.get("persistent", False),
        admission=region.get("admission", "evict"),
        volatility=region.get("volatility", "rewritten"),
        meta=meta,
        steps=tuple(_parse_step(i, step) for i, step in enumerate(steps)),
    )


def _check_meta(meta: Mapping[str, Any], where: str) -> None:
    _need(isinstance(meta.get("stage_name", ""), str), f"{where}.stage_name", "must be a string")
    _need(
        _is_int(meta.get("stage_iterations", 0)),
        f"{where}.stage_iterations",
        f"must be {_INT_TEXT}",
    )
    _need(isinstance(meta.get("model", ""), str), f"{where}.model", "must be a string")
    window = meta.get("window", {})
    _need(isinstance(window, dict), f"{where}.window", "must be an object")
    for key in ("total_tokens", "max_tokens"):
        if key in window:
            _need(_is_int(window[key]), f"{where}.window.{key}", f"must be {_INT_TEXT}")


def _parse_step(index: int, step: Any) -> tuple[str, Mapping[str, Any]]:
    where = f"steps[{index}]"
    _need(isinstance(step, dict) and len(step) == 1, where, f"one of {', '.join(_OPS)} as the only key")
    op, body = next(iter(step.items()))
    _need(op in _OPS, where, f"unknown step {op!r} (expected {', '.join(_OPS)})")
    _need(isinstance(body, dict), f"{where}.{op}", "must be an object")
    if op in ("write", "replace"):
        _need(isinstance(body.get("content"), str), f"{where}.{op}.content", "a string is required")
        if body.get("tokens") is not None:
            _need(_is_int(body["tokens"]), f"{where}.{op}.tokens", f"must be {_INT_TEXT}")
    if op == "write":
        _need(
            body.get("kind", "text") in ENTRY_KINDS, f"{where}.write.kind", f"one of {', '.join(ENTRY_KINDS)}"
        )
        _need(body.get("key") is None or isinstance(body["key"], str), f"{where}.write.key", "string or null")
        calls = body.get("tool_calls", [])
        _need(isinstance(calls, list), f"{where}.write.tool_calls", "must be an array")
        for j, call in enumerate(calls):
            ok = (
                isinstance(call, dict)
                and isinstance(call.get("id"), str)
                and isinstance(call.get("name"), str)
            )
            _need(ok, f"{where}.write.tool_calls[{j}]", "an object with string id and name")
            _need(
                call.get("thought_signature") is None or isinstance(call["thought_signature"], str),
                f"{where}.write.tool_calls[{j}].thought_signature",
                "string or absent",
            )
        for key in ("tool_call_id", "tool_name"):
            _need(isinstance(body.get(key, ""), str), f"{where}.write.{key}", "must be a string")
        _need(
            isinstance(body.get("is_error", False), bool), f"{where}.write.is_error", "must be true or false"
        )
        _need(isinstance(body.get("tainted", False), bool), f"{where}.write.tainted", "must be true or false")
    if op == "evict":
        _need(_is_int(body.get("needed_tokens")), f"{where}.evict.needed_tokens", _INT_TEXT)
    if op == "render":
        _check_meta(body, f"{where}.render")
    return op, body


def _entry_from(body: Mapping[str, Any]) -> Entry:
    content = body["content"]
    tokens = body.get("tokens")
    return Entry(
        content,
        estimate_tokens(content) if tokens is None else tokens,
        body.get("kind", "text"),
        body.get("key"),
        0,
        tuple(ToolCall.from_json(c) for c in body.get("tool_calls", [])),
        str(body.get("tool_call_id", "")),
        str(body.get("tool_name", "")),
        bool(body.get("is_error", False)),
        bool(body.get("tainted", False)),
    )


def _meta_for(scenario: Scenario, region: Region, override: Mapping[str, Any]) -> RenderMeta:
    merged = {**scenario.meta, **{k: v for k, v in override.items() if k != "window"}}
    window = {**scenario.meta.get("window", {}), **override.get("window", {})}
    return RenderMeta(
        stage_name=merged.get("stage_name", ""),
        stage_iterations=merged.get("stage_iterations", 0),
        model=merged.get("model", ""),
        window_total_tokens=window.get("total_tokens", region.current_tokens),
        window_max_tokens=window.get("max_tokens", region.budget),
    )


async def run_scenario(
    scenario: Scenario,
    pool: RegionPool,
    *,
    hook_timeout: float = DEFAULT_HOOK_TIMEOUT,
    tenant: str | None = None,
) -> ScenarioResult:
    """Load the script through the pool and replay every step in order.

    Raises ``RegionLoadError`` when the script does not load (nothing runs).
    """
    loader = RegionLoader(pool, timeout=hook_timeout, tenant=tenant)
    region = await loader.region(
        scenario.name,
        str(scenario.script),
        budget=scenario.budget,
        persistent=scenario.persistent,
        admission="reject" if scenario.admission == "reject" else "evict",
        volatility=scenario.volatility,  # type: ignore[arg-type]
    )
    steps: list[dict[str, Any]] = []
    requests: dict[int, AssembledRequest] = {}
    for index, (op, body) in enumerate(scenario.steps):
        if op == "write":
            steps.append((await region.write_entry(_entry_from(body))).to_json())
        elif op == "replace":
            steps.append((await region.replace(body["content"], body.get("tokens"))).to_json())
        elif op == "evict":
            steps.append((await region.evict(body["needed_tokens"])).to_json())
        else:
            report: RenderReport = await region.render(_meta_for(scenario, region, body))
            steps.append(report.to_json())
            requests[index] = assemble([report.as_region_output()])
    entries = [entry.to_ctx(with_timestamp=False) for entry in region.entries]
    sha = region.script.sha256 if region.script is not None else ""
    return ScenarioResult(scenario, sha, steps, entries, requests)
