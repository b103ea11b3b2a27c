"""Human-readable output for ``rhaipool test`` and ``rhaipool validate --kind region``.

Compact, one line per step, warnings marked with ``!`` (and coloured when the
terminal supports it), and after each render the request the provider would
receive -- the point of a preview.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from coordinator._cli.scenario import ScenarioResult
from coordinator.regions.assembly import AssembledRequest

__all__ = ["Style", "format_request", "format_result"]

Style = Callable[[str, str], str]
"""``style(text, role)`` with role ``"warn"``, ``"error"``, ``"dim"`` or ``"head"``; identity when plain."""


def _plain(text: str, role: str) -> str:
    return text


def _clip(text: str, width: int = 100) -> str:
    flat = text.replace("\n", "\\n")
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _full(text: str, indent: str) -> str:
    """Whole text, continuation lines indented under the first: a preview must not hide anything."""
    return text.replace("\n", "\n" + indent + "  ")


def _block_text(block: dict[str, Any], indent: str) -> str:
    kind = block.get("type")
    if kind == "text":
        return _full(str(block.get("text", "")), indent)
    if kind == "tool_use":
        args = json.dumps(block.get("input"), ensure_ascii=False, sort_keys=True)
        return f"tool_use {block.get('id')} {block.get('name')}({_clip(args, 60)})"
    err = " error" if block.get("is_error") else ""
    return f"tool_result {block.get('tool_use_id')}{err}: {_full(str(block.get('content', '')), indent)}"


def _message_lines(message: dict[str, Any], indent: str) -> list[str]:
    content = message["content"]
    mark = " [cache]" if message.get("cache_breakpoint") else ""
    if isinstance(content, str):
        return [f"{indent}{message['role']}{mark}: {_full(content, indent)}"]
    count = f"{len(content)} block" + ("" if len(content) == 1 else "s")
    lines = [f"{indent}{message['role']}{mark}: ({count})"]
    return lines + [f"{indent}  - {_block_text(block, indent + '  ')}" for block in content]


def format_request(request: AssembledRequest, indent: str = "    ") -> list[str]:
    """The assembled request: system blocks with their cache facts, then messages."""
    data = request.to_json()
    lines: list[str] = []
    for block in data["system"]:
        hint = block["cache_hint"] if isinstance(block["cache_hint"], str) else "SlidingPrefix"
        lines.append(f"{indent}system [{hint}, {block['volatility']}]: {_full(block['text'], indent)}")
    for message in data["messages"]:
        lines.extend(_message_lines(message, indent))
    return lines


_SHA = re.compile(r", sha256 [0-9a-f?]+\)")


def _warnings(warnings: Sequence[str], style: Style, verbose: bool = False) -> list[str]:
    """Warnings name the script by its path; its hash is shown only with ``-v``."""
    return [style(f"    ! {w if verbose else _SHA.sub(')', w)}", "warn") for w in warnings]


def _step_lines(
    index: int, step: dict[str, Any], result: ScenarioResult, style: Style, verbose: bool
) -> list[str]:
    head = f"[{index + 1}] {step['op']:<7}"
    op = step["op"]
    if op in ("write", "replace"):
        line = f"{head} {step['outcome']}"
        if step["content"] is not None:
            line += (
                f"  {_clip(json.dumps(step['content'], ensure_ascii=False), 60)} ({step['tokens']} tokens)"
            )
        if step["dropped_indices"]:
            line += f"  on_overflow dropped {step['dropped_indices']}"
        lines = [style(line, "error") if step["outcome"] == "error" else line]
        if step["error"]:
            lines.append(style(f"    error: {step['error']}", "error"))
    elif op == "evict":
        dropped = (
            ", ".join(_clip(json.dumps(c, ensure_ascii=False), 30) for c in step["dropped"]) or "nothing"
        )
        lines = [f"{head} freed {step['freed']} tokens: {dropped}"]
    else:
        kind = "FALLBACK" if step["fallback"] else "ok"
        lines = [f"{head} {kind}: {len(step['system'])} system block(s), {len(step['messages'])} message(s)"]
        request = result.requests.get(index)
        if request is not None:
            lines.append(style("    what the model would see:", "dim"))
            lines.extend(format_request(request, "      "))
    return lines + _warnings(step["warnings"], style, verbose)


def _failure_lines(result: ScenarioResult, style: Style) -> list[str]:
    """Each failed expectation like pytest shows one: what was expected, what came, a diff for texts."""
    lines: list[str] = []
    for f in result.failures:
        lines.append(style(f"FAILED step [{f.step}] {f.op}: expect.{f.key}", "error"))
        if f.key == "equals" and isinstance(f.actual, str):
            diff = difflib.ndiff(str(f.expected).splitlines(), f.actual.splitlines())
            lines += [f"    {d}" for d in diff]
        elif f.key == "contains":
            lines += [
                f"    expected to contain: {f.expected!r}",
                f"    actual text:         {_clip(str(f.actual), 200)!r}",
            ]
        else:
            lines += [f"    expected: {f.expected!r}", f"    actual:   {f.actual!r}"]
    return lines


def format_result(result: ScenarioResult, style: Style = _plain, verbose: bool = False) -> str:
    """The whole scenario run, for a person."""
    scenario = result.scenario
    flags = ["persistent" if scenario.persistent else "non-persistent"]
    if scenario.admission == "reject":
        flags.append('admission "reject"')
    lines = [
        style(f"{scenario.script}" + (f"  sha256 {result.script_sha256[:12]}" if verbose else ""), "head"),
        f"region {scenario.name!r}  budget {scenario.budget}  {', '.join(flags)}",
    ]
    for index, step in enumerate(result.steps):
        lines.extend(_step_lines(index, step, result, style, verbose))
    total = sum(int(e["tokens"]) for e in result.entries)
    lines.append(style(f"entries ({len(result.entries)}, {total} tokens):", "head"))
    for i, entry in enumerate(result.entries):
        key = f" key={entry['key']}" if entry["key"] is not None else ""
        content = _clip(json.dumps(entry["content"], ensure_ascii=False), 70)
        lines.append(f"  {i}: {entry['kind']}{key} {content} ({entry['tokens']} tokens)")
    lines += _failure_lines(result, style)
    if any("expect" in body for _, body in scenario.steps):
        verdict = "passed" if result.passed else f"FAILED ({len(result.failures)} expectation(s))"
        lines.append(style(f"expectations: {verdict}", "head" if result.passed else "error"))
    return "\n".join(lines)
