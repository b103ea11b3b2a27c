"""A whole context window: custom regions among built-in ones (docs/scripts/regions.md#renderctx,
docs/scripts/regions.md#on_overflowctx).

Hosts that keep their own window can use ``assemble`` and the ``Region``
methods directly; this class is the reference's window in miniature, so that
window-level eviction and "what the model would see" can be reproduced
exactly -- including a custom region's preamble landing in front of the
conversation and its ``on_overflow`` getting first say before oldest-first.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from coordinator.regions.assembly import AssembledRequest, RegionOutput, assemble
from coordinator.regions.errors import PinnedOverBudget
from coordinator.regions.eviction import oldest_group_size
from coordinator.regions.hooks import RenderMeta
from coordinator.regions.model import Entry, Message, SystemBlock, Volatility, rust_trim
from coordinator.regions.reports import RegionWarning, RenderReport
from coordinator.regions.runtime import Region

__all__ = ["BuiltinRegion", "PinnedOverBudget", "Window", "WindowEviction"]

BuiltinKind = Literal[
    "pinned", "temporary", "clearable", "sliding_window", "compact_history", "compacting", "hashmap"
]
_HINTS: dict[str, str] = {
    "pinned": "Always",
    "compact_history": "Always",
    "compacting": "UntilChanged",
    "hashmap": "UntilChanged",
    "temporary": "Never",
    "clearable": "Never",
}


@dataclass(slots=True)
class BuiltinRegion:
    """A built-in region kind, rendered the way the reference renders it."""

    name: str
    kind: BuiltinKind
    entries: list[Entry] = field(default_factory=list)
    admission: Literal["evict", "reject"] = "evict"
    volatility: Volatility = "rewritten"
    threshold_tokens: int | None = None

    @property
    def current_tokens(self) -> int:
        """Sum of the stored entries' tokens."""
        return sum(entry.tokens for entry in self.entries)

    def render(self) -> RegionOutput:
        """System block or conversation messages; an empty built-in region shows nothing."""
        if not self.entries:
            return RegionOutput()
        if self.kind == "sliding_window":
            return RegionOutput(messages=conversation_messages(self.entries))
        if self.kind == "hashmap":
            parts = [f"### [{e.key}]\n{e.content}" if e.key is not None else e.content for e in self.entries]
        else:
            parts = [e.content for e in self.entries]
        text = "\n\n".join(parts)
        if self.kind not in ("pinned", "compact_history"):
            text = f"[{self.name}]:\n{text}"
        return RegionOutput((SystemBlock(text, _HINTS[self.kind], self.volatility, self.name),))


def conversation_messages(entries: Sequence[Entry]) -> tuple[Message, ...]:
    """A sliding-window region's messages; consecutive tool results share one user message."""
    out: list[Message] = []
    pending: list[dict[str, Any]] = []
    for entry in entries:
        if entry.kind != "tool_result" and pending:
            out.append(Message("user", tuple(pending)))
            pending = []
        if entry.kind == "tool_result":
            pending.append(
                {
                    "type": "tool_result",
                    "tool_use_id": entry.tool_call_id,
                    "content": entry.content,
                    "is_error": entry.is_error,
                }
            )
        elif entry.kind == "assistant_turn" and entry.tool_calls:
            blocks: list[dict[str, Any]] = [{"type": "text", "text": entry.content}] if entry.content else []
            for call in entry.tool_calls:
                block = {"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments}
                if call.thought_signature is not None:
                    block["thought_signature"] = call.thought_signature
                blocks.append(block)
            out.append(Message("assistant", tuple(blocks)))
        elif entry.kind in ("assistant_turn", "user_message"):
            out.append(Message("assistant" if entry.kind == "assistant_turn" else "user", entry.content))
        else:
            out.append(_text_message(entry.content))
    if pending:
        out.append(Message("user", tuple(pending)))
    return tuple(out)


def _text_message(content: str) -> Message:
    trimmed = rust_trim(content)
    if trimmed.startswith("Assistant: "):
        return Message("assistant", trimmed.removeprefix("Assistant: "))
    if trimmed.startswith("User: "):
        return Message("user", trimmed.removeprefix("User: "))
    return Message("user", content)


@dataclass(frozen=True, slots=True)
class WindowEviction:
    """What ``try_evict`` did: tokens freed, entries removed per region, regions to compact."""

    freed: int
    dropped: dict[str, tuple[Entry, ...]]
    needs_compaction: tuple[str, ...] = ()
    warnings: tuple[RegionWarning, ...] = ()


class Window:
    """Regions in declaration order under one token budget."""

    def __init__(self, max_tokens: int, regions: Sequence[Region | BuiltinRegion]) -> None:
        self.max_tokens = max_tokens
        self.regions = list(regions)
        self.hidden: set[str] = set()
        self.previous_system_hash: str | None = None

    @property
    def current_tokens(self) -> int:
        """Tokens held by every region."""
        return sum(region.current_tokens for region in self.regions)

    def free(self) -> int:
        """``max - current``, saturating at 0."""
        return max(0, self.max_tokens - self.current_tokens)

    async def assemble(
        self, *, stage_name: str = "", stage_iterations: int = 0, model: str = ""
    ) -> tuple[AssembledRequest, list[RenderReport]]:
        """Render every shown region and assemble the request (docs/scripts/regions.md#renderctx).

        Returns the request and the custom regions' render reports (warnings,
        fallbacks).  Hidden regions are skipped entirely.
        """
        meta = RenderMeta(stage_name, stage_iterations, model, self.current_tokens, self.max_tokens)
        shown = [region for region in self.regions if region.name not in self.hidden]
        try:
            async with asyncio.TaskGroup() as group:  # custom regions render in parallel workers
                tasks = {
                    id(region): group.create_task(region.render(meta))
                    for region in shown
                    if isinstance(region, Region)
                }
        except (
            BaseExceptionGroup
        ) as failed:  # hooks never raise: a pool-level error, as Region.render raises it
            raise failed.exceptions[0] from None
        reports = [task.result() for task in tasks.values()]
        outputs = [
            tasks[id(region)].result().as_region_output() if isinstance(region, Region) else region.render()
            for region in shown
        ]
        request = assemble(outputs, previous_system_hash=self.previous_system_hash)
        self.previous_system_hash = request.system_hash
        return request, reports

    def _goal_met(self, target_free: int) -> bool:
        return self.free() >= target_free

    async def try_evict(self, target_free: int) -> WindowEviction:
        """Free room until ``max - current >= target_free`` (docs/scripts/regions.md#on_overflowctx).

        Raises ``PinnedOverBudget`` when the never-evicted regions alone exceed
        the window and the goal could not be met.  A window that already has
        the room loses nothing: no region is cleared, no ``on_overflow`` runs.
        """
        dropped: dict[str, list[Entry]] = {}
        warnings: list[RegionWarning] = []
        start = self.current_tokens
        if self._goal_met(target_free):
            return self._result(start, dropped, (), warnings)
        if self._phase1(target_free, dropped) or await self._phase15(target_free, dropped, warnings):
            return self._result(start, dropped, (), warnings)
        if self._phase2(target_free, dropped):
            return self._result(start, dropped, (), warnings)
        compact = tuple(
            r.name
            for r in self.regions
            if isinstance(r, BuiltinRegion)
            and r.kind == "compacting"
            and r.threshold_tokens is not None
            and r.current_tokens > r.threshold_tokens
        )
        pinned = sum(
            r.current_tokens
            for r in self.regions
            if (isinstance(r, Region) and r.persistent)
            or (isinstance(r, BuiltinRegion) and r.kind in ("pinned", "compact_history"))
        )
        if pinned > self.max_tokens:
            raise PinnedOverBudget(pinned, self.max_tokens)
        return self._result(start, dropped, compact, warnings)

    def _phase1(self, target_free: int, dropped: dict[str, list[Entry]]) -> bool:
        for region in self.regions:
            if (
                not isinstance(region, BuiltinRegion)
                or region.kind != "clearable"
                or region.admission == "reject"
            ):
                continue
            if region.entries:
                dropped.setdefault(region.name, []).extend(region.entries)
                region.entries.clear()
                if self._goal_met(target_free):
                    return True
        return False

    async def _phase15(
        self, target_free: int, dropped: dict[str, list[Entry]], warnings: list[RegionWarning]
    ) -> bool:
        custom_freed = 0
        for region in self.regions:
            needed = max(0, target_free - self.free())
            if needed == 0:
                break
            if not isinstance(region, Region) or not region.evictable or not region.entries:
                continue
            report = await region.overflow_drop(needed)
            custom_freed += report.freed
            dropped.setdefault(region.name, []).extend(report.dropped)
            warnings.extend(report.warnings)
        return custom_freed > 0 and self._goal_met(target_free)

    def _phase2(self, target_free: int, dropped: dict[str, list[Entry]]) -> bool:
        while True:
            evicted_any = False
            for region in self.regions:
                if isinstance(region, Region) and region.evictable:
                    group = region.drop_oldest_group()
                elif (
                    isinstance(region, BuiltinRegion)
                    and region.kind == "temporary"
                    and region.admission != "reject"
                ):
                    size = oldest_group_size(region.entries)
                    group = tuple(region.entries[:size])
                    del region.entries[:size]
                else:
                    continue
                if group:
                    evicted_any = True
                    dropped.setdefault(region.name, []).extend(group)
                    if self._goal_met(target_free):
                        return True
            if not evicted_any:
                return False

    def _result(
        self,
        start: int,
        dropped: dict[str, list[Entry]],
        compact: tuple[str, ...],
        warnings: list[RegionWarning],
    ) -> WindowEviction:
        removed = {name: tuple(entries) for name, entries in dropped.items() if entries}
        return WindowEviction(max(0, start - self.current_tokens), removed, compact, tuple(warnings))
