"""``rhaipool test``: replay a scenario against one custom region, checking what each step expects.

A scenario is checked completely before anything runs, so a typo in step 7
is reported as such instead of after six steps of script calls.

One module past 400 lines: parsing a step, running it and checking its ``expect`` read the same
step shapes, and keeping them together keeps those shapes defined once.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, Protocol

from coordinator._cli.errors import ScenarioError
from coordinator.regions.assembly import AssembledRequest, assemble
from coordinator.regions.hooks import RenderMeta
from coordinator.regions.loading import DEFAULT_HOOK_TIMEOUT, RegionLoader, RegionPool
from coordinator.regions.model import ENTRY_KINDS, VOLATILITIES, Entry, ToolCall
from coordinator.regions.reports import RenderReport
from coordinator.regions.runtime import Region
from coordinator.regions.tokens import estimate_tokens

__all__ = [
    "ExpectationFailure",
    "RegionState",
    "Scenario",
    "ScenarioError",
    "ScenarioResult",
    "check_step",
    "load_scenario",
    "render_text",
    "run_scenario",
]

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
    """Step reports, final entries, what the model saw at each render, and failed expectations."""

    scenario: Scenario
    script_sha256: str
    steps: list[dict[str, Any]]
    entries: list[dict[str, Any]]
    requests: dict[int, AssembledRequest]
    failures: list[ExpectationFailure] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Every stated expectation held."""
        return not self.failures

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: ``{"steps": [...], "entries": [...], "passed",
        "failures": [{"step", "key", "expected", "actual"}]}``."""
        return {
            "steps": self.steps,
            "entries": self.entries,
            "passed": self.passed,
            "failures": [f.to_json() for f in self.failures],
        }


_KEYS: Final[dict[str, frozenset[str]]] = {
    "scenario": frozenset({"script", "region", "meta", "steps", "description"}),
    "region": frozenset({"name", "budget", "persistent", "admission", "volatility"}),
    "meta": frozenset({"stage_name", "stage_iterations", "model", "window"}),
    "window": frozenset({"total_tokens", "max_tokens"}),
    "write": frozenset(
        {"content", "tokens", "kind", "key", "tool_calls", "tool_call_id", "tool_name", "is_error", "tainted"}
    ),
    "replace": frozenset({"content", "tokens"}),
    "evict": frozenset({"needed_tokens"}),
    "tool_call": frozenset({"id", "name", "arguments", "thought_signature"}),
    "expect": frozenset({"contains", "equals", "outcome", "entries", "tokens", "fallback"}),
}
"""Every key a scenario may use, by place: anything else is a typo, reported with a suggestion."""


@dataclass(frozen=True, slots=True)
class ExpectationFailure:
    """One expectation that did not hold."""

    step: int
    op: str
    key: str
    expected: Any
    actual: Any

    def to_json(self) -> dict[str, Any]:
        """``{"step", "op", "key", "expected", "actual"}`` (step is 1-based, as printed)."""
        return {
            "step": self.step,
            "op": self.op,
            "key": self.key,
            "expected": self.expected,
            "actual": self.actual,
        }


def _known(body: Mapping[str, Any], place: str, where: str, extra: frozenset[str] = frozenset()) -> None:
    allowed = _KEYS[place] | extra
    for key in body:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), sorted(allowed), n=1, cutoff=0.6)
            hint = (
                f" (did you mean '{close[0]}'?)"
                if close
                else f" (expected one of {', '.join(sorted(allowed))})"
            )
            raise ScenarioError(f"{where}: unknown key '{key}'{hint}")


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
    _known(raw, "scenario", str(path))
    _need(
        isinstance(raw.get("script"), str) and raw["script"].strip() != "",
        "script",
        "a non-empty path is required",
    )
    region = raw.get("region")
    _need(isinstance(region, dict), "region", "an object with name and budget is required")
    _known(region, "region", "region")
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


def _check_meta(meta: Mapping[str, Any], where: str, extra: frozenset[str] = frozenset()) -> None:
    _known(meta, "meta", where, extra)
    _need(isinstance(meta.get("stage_name", ""), str), f"{where}.stage_name", "must be a string")
    _need(
        _is_int(meta.get("stage_iterations", 0)),
        f"{where}.stage_iterations",
        f"must be {_INT_TEXT}",
    )
    _need(isinstance(meta.get("model", ""), str), f"{where}.model", "must be a string")
    window = meta.get("window", {})
    _need(isinstance(window, dict), f"{where}.window", "must be an object")
    _known(window, "window", f"{where}.window")
    for key in ("total_tokens", "max_tokens"):
        if key in window:
            _need(_is_int(window[key]), f"{where}.window.{key}", f"must be {_INT_TEXT}")


def _parse_step(index: int, step: Any) -> tuple[str, Mapping[str, Any]]:
    where = f"steps[{index}]"
    _need(isinstance(step, dict) and len(step) == 1, where, f"one of {', '.join(_OPS)} as the only key")
    op, body = next(iter(step.items()))
    _need(op in _OPS, where, f"unknown step {op!r} (expected {', '.join(_OPS)})")
    _need(isinstance(body, dict), f"{where}.{op}", "must be an object")
    if op != "render":
        _known(body, op, f"{where}.{op}", frozenset({"expect"}))
    _check_expect(body.get("expect", {}), op, f"{where}.{op}.expect")
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
            _known(call, "tool_call", f"{where}.write.tool_calls[{j}]")
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
        _check_meta(body, f"{where}.render", frozenset({"expect"}))
    return op, body


def _check_expect(expect: Any, op: str, where: str) -> None:
    _need(isinstance(expect, dict), where, "must be an object")
    _known(expect, "expect", where)
    for key in ("contains", "equals", "fallback"):
        _need(key not in expect or op == "render", f"{where}.{key}", "only a render step has text")
    _need("outcome" not in expect or op in ("write", "replace"), f"{where}.outcome", "only writes have one")
    contains = expect.get("contains", [])
    contains = [contains] if isinstance(contains, str) else contains
    _need(
        isinstance(contains, list) and all(isinstance(c, str) for c in contains),
        f"{where}.contains",
        "a string or a list of strings",
    )
    _need(isinstance(expect.get("equals", ""), str), f"{where}.equals", "must be a string")
    _need(
        expect.get("outcome", "accepted") in ("accepted", "replaced", "dropped", "error"),
        f"{where}.outcome",
        "accepted, replaced, dropped or error",
    )
    for key in ("entries", "tokens"):
        if key in expect:
            _need(_is_int(expect[key]), f"{where}.{key}", _INT_TEXT)
    _need(isinstance(expect.get("fallback", False), bool), f"{where}.fallback", "must be true or false")


def render_text(request: AssembledRequest) -> str:
    """What the model would read, as one text: system blocks, then each message's text."""
    data = request.to_json()
    parts = [str(b["text"]) for b in data["system"]]
    for message in data["messages"]:
        content = message["content"]
        if isinstance(content, str):
            parts.append(content)
        else:
            parts.extend(str(b.get("text") or b.get("content") or "") for b in content)
    return "\n".join(parts)


class RegionState(Protocol):
    """What expectations read of a region after a step (a local ``Region``, or a service's answer)."""

    @property
    def entries(self) -> Sequence[Any]: ...

    @property
    def current_tokens(self) -> int: ...


def check_step(
    index: int, op: str, body: Mapping[str, Any], step: dict[str, Any], region: RegionState, text: str | None
) -> list[ExpectationFailure]:
    """The failed expectations of one step (empty when it states none or all held)."""
    expect = body.get("expect", {})
    out: list[ExpectationFailure] = []

    def check(key: str, expected: Any, actual: Any, ok: bool) -> None:
        if not ok:
            out.append(ExpectationFailure(index + 1, op, key, expected, actual))

    contains = expect.get("contains", [])
    for needle in [contains] if isinstance(contains, str) else contains:
        check("contains", needle, text, text is not None and needle in text)
    if "equals" in expect:
        check("equals", expect["equals"], text, text == expect["equals"])
    if "fallback" in expect:
        check(
            "fallback", expect["fallback"], step.get("fallback"), step.get("fallback") == expect["fallback"]
        )
    if "outcome" in expect:
        check("outcome", expect["outcome"], step.get("outcome"), step.get("outcome") == expect["outcome"])
    if "entries" in expect:
        left = len(region.entries)
        check("entries", expect["entries"], left, left == expect["entries"])
    if "tokens" in expect:
        used = region.current_tokens
        check("tokens", expect["tokens"], used, used == expect["tokens"])
    return out


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
    failures: list[ExpectationFailure] = []
    for index, (op, body) in enumerate(scenario.steps):
        text = None
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
            text = render_text(requests[index])
        failures += check_step(index, op, body, steps[-1], region, text)
    entries = [entry.to_ctx(with_timestamp=False) for entry in region.entries]
    sha = region.script.sha256 if region.script is not None else ""
    return ScenarioResult(scenario, sha, steps, entries, requests, failures)
