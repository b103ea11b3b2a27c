"""One custom region: its entries, and the contract around its three hooks
(docs/scripts/regions.md#persistent-regions, docs/scripts/regions.md#on_overflowctx).

``Region`` is what a host holds.  Every hook goes through a ``HookRunner`` (in
production, the sandboxed pool); whatever a hook does -- throw, loop, blow a
limit, kill its worker -- the region answers exactly as the reference runtime
does: a fallback block, an unchanged write, nothing freed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any, Literal

from coordinator.regions.entries import StoredEntries
from coordinator.regions.eviction import Removal, oldest_group_size, remove_indices, validate_indices
from coordinator.regions.hooks import (
    HookRunner,
    RegionState,
    RenderMeta,
    ScriptInfo,
    on_overflow_ctx,
    on_write_ctx,
    render_ctx,
)
from coordinator.regions.model import Entry, EntryKind, ToolCall, Volatility, plain_json
from coordinator.regions.render import InvalidShape, RenderOutput, fallback_blocks, interpret_render
from coordinator.regions.reports import EvictReport, RegionWarning, RenderReport, WriteReport
from coordinator.regions.tokens import estimate_tokens, render_cost
from coordinator.regions.writes import BudgetExceeded, RegionFull, interpret_on_write
from coordinator.tenancy import DEFAULT_TENANT

__all__ = ["Admission", "Region"]

Admission = Literal["evict", "reject"]
_log = logging.getLogger("rhaipool.regions")
_log.addHandler(logging.NullHandler())  # a library logs; the host decides where it goes


class Region:
    """A ``kind = "custom"`` region backed by a script.

    Operations on one region are serialized (an ``asyncio.Lock``): a write's
    ``on_write``, budget check and ``on_overflow`` see one consistent state.
    ``runner=None`` models a region whose script is missing from the table: it
    renders its fallback block and runs no hooks.
    """

    def __init__(
        self,
        name: str,
        runner: HookRunner | None,
        *,
        budget: int,
        persistent: bool = False,
        admission: Admission = "evict",
        volatility: Volatility = "rewritten",
        clock: Callable[[], float] = time.time,
        tenant: str = DEFAULT_TENANT,
    ) -> None:
        if isinstance(budget, bool) or not isinstance(budget, int) or budget < 0:
            raise ValueError(f"region '{name}': budget must be a non-negative integer, got {budget!r}")
        if admission not in ("evict", "reject"):
            raise ValueError(f'region \'{name}\': admission must be "evict" or "reject", got {admission!r}')
        if volatility not in ("stable", "grows", "rewritten"):
            raise ValueError(f"region '{name}': unknown volatility {volatility!r}")
        self.name = name
        self.budget = budget
        self.persistent = persistent
        self.admission: Admission = admission
        self.volatility: Volatility = volatility
        self.tenant = tenant  # whose hooks these are: named in the region's log lines
        self._runner = runner
        self._clock = clock
        self._entries = StoredEntries()
        self._lock = asyncio.Lock()

    # -- state -----------------------------------------------------------

    @property
    def script(self) -> ScriptInfo | None:
        """The loaded script, or ``None`` when the region has none."""
        return None if self._runner is None else self._runner.script

    @property
    def runner(self) -> HookRunner | None:
        """What runs this region's hooks (a ``PoolHookRunner`` for a pool-backed region)."""
        return self._runner

    @property
    def entries(self) -> tuple[Entry, ...]:
        """Stored entries, oldest first."""
        return self._entries.snapshot()

    @property
    def current_tokens(self) -> int:
        """Sum of the stored entries' tokens."""
        return self._entries.tokens

    def state(self) -> RegionState:
        """The ``ctx.region`` object for the next hook call."""
        return RegionState(self.name, self.budget, self.current_tokens, len(self._entries))

    def restore(self, entries: Iterable[Entry]) -> None:
        """Re-add entries (snapshot restore, layout swap): no ``on_write``, no budget check."""
        self._entries.extend(entries)

    def clear(self, *, edge: bool = False) -> int:
        """Remove every entry; returns the tokens freed.

        ``edge=True`` is a stage-transition ``clear``/``compact`` transform, which a
        persistent region is immune to (docs/scripts/regions.md#persistent-regions): it then does nothing.
        """
        if edge and self.persistent:
            return 0
        freed = self.current_tokens
        self._entries.clear()
        return freed

    # -- writes (docs/scripts/regions.md#on_writectx, docs/scripts/regions.md#on_overflowctx) ----------------

    async def write(
        self,
        content: str,
        tokens: int | None = None,
        *,
        kind: EntryKind = "text",
        key: str | None = None,
        tool_calls: Sequence[ToolCall] = (),
        tool_call_id: str = "",
        tool_name: str = "",
        is_error: bool = False,
        tainted: bool = False,
    ) -> WriteReport:
        """Append one entry through ``on_write`` and the write-time budget path.

        ``tokens`` is the writer's count; omitted, it is estimated as
        ``ceil(bytes / 4)``.  A refused write returns an ``error`` report
        (``report.raise_for_error()`` turns it into an exception).
        """
        entry = Entry(
            content,
            estimate_tokens(content) if tokens is None else tokens,
            kind,
            key,
            0,
            tuple(tool_calls),
            tool_call_id,
            tool_name,
            is_error,
            tainted,
        )
        return await self.write_entry(entry)

    async def write_entry(self, entry: Entry) -> WriteReport:
        """``write`` for a ready-made ``Entry`` (its timestamp is set on insertion)."""
        async with self._lock:
            return await self._write(entry, "write")

    async def replace(self, content: str, tokens: int | None = None) -> WriteReport:
        """``replace_region``: clear, then add one text entry, through ``on_write``.

        A dropped replacement leaves the current entries in place.  As in the
        reference, the add after the clear takes no ``on_overflow`` retry: an
        entry larger than the budget leaves the region empty (reported as an
        error with a warning, where the reference says nothing).
        """
        entry = Entry(content, estimate_tokens(content) if tokens is None else tokens)
        async with self._lock:
            return await self._write(entry, "replace")

    async def _write(self, entry: Entry, op: Literal["write", "replace"]) -> WriteReport:
        warnings: list[RegionWarning] = []
        entry, outcome = await self._apply_on_write(entry, warnings)
        if outcome == "dropped":
            return WriteReport(op, "dropped", None, warnings=tuple(warnings))
        entry = replace(entry, timestamp=int(self._clock()))
        if op == "replace":
            self._entries.clear()
            if entry.tokens > self.budget:
                cause = f"the replacement ({entry.tokens} tokens) exceeds the budget; the region was cleared"
                warnings.append(self._warning("replace", cause))
                error = BudgetExceeded(entry.tokens, self.budget)
                return WriteReport(op, "error", entry, (), str(error), "TokenBudgetExceeded", tuple(warnings))
            self._entries.append(entry)
            return WriteReport(op, outcome, entry, warnings=tuple(warnings))
        return await self._insert(entry, outcome, warnings)

    async def _apply_on_write(
        self, entry: Entry, warnings: list[RegionWarning]
    ) -> tuple[Entry, Literal["accepted", "replaced", "dropped"]]:
        script = self.script
        if self._runner is None or script is None or not script.has_on_write:
            return entry, "accepted"
        value, cause = await self._call("on_write", on_write_ctx(self.state(), entry))
        if cause is not None:
            warnings.append(self._warning("on_write", f"{cause}; entry accepted unchanged"))
            return entry, "accepted"
        decision = interpret_on_write(value)
        if decision.warning is not None:
            warnings.append(self._warning("on_write", decision.warning))
        if decision.action == "drop":
            return entry, "dropped"
        if decision.action == "replace" and decision.content is not None and decision.tokens is not None:
            return replace(entry, content=decision.content, tokens=decision.tokens), "replaced"
        return entry, "accepted"

    def _refusal(self, entry: Entry) -> BudgetExceeded | RegionFull | None:
        used = self.current_tokens + entry.tokens
        if used <= self.budget:
            return None
        if self.admission == "reject" and self._entries:
            return RegionFull(self.name, self.current_tokens, self.budget)
        return BudgetExceeded(used, self.budget)

    async def _insert(
        self, entry: Entry, outcome: Literal["accepted", "replaced"], warnings: list[RegionWarning]
    ) -> WriteReport:
        refusal = self._refusal(entry)
        if refusal is None:
            self._entries.append(entry)
            return WriteReport("write", outcome, entry, warnings=tuple(warnings))
        script = self.script
        dropped: tuple[int, ...] = ()
        if isinstance(refusal, BudgetExceeded) and script is not None and script.has_on_overflow:
            needed = self.current_tokens + entry.tokens - self.budget
            removal = await self._overflow(needed, warnings)
            dropped = removal.indices
            if needed > 0 and removal.freed >= needed:
                refusal = self._refusal(entry)
                if refusal is None:
                    self._entries.append(entry)
                    return WriteReport("write", outcome, entry, dropped, warnings=tuple(warnings))
        kind: Literal["RegionFull", "TokenBudgetExceeded"] = (
            "RegionFull" if isinstance(refusal, RegionFull) else "TokenBudgetExceeded"
        )
        return WriteReport("write", "error", entry, dropped, str(refusal), kind, tuple(warnings))

    # -- on_overflow and eviction (docs/scripts/regions.md#on_overflowctx) ----------------------------------

    async def _overflow(self, needed: int, warnings: list[RegionWarning]) -> Removal:
        """Ask ``on_overflow`` what to drop and apply a valid answer; never raises."""
        entries = self._entries.snapshot()
        value, cause = await self._call(
            "on_overflow", on_overflow_ctx(self.state(), self._entries.ctxs(), needed)
        )
        if cause is not None:
            warnings.append(self._warning("on_overflow", f"{cause}; nothing dropped"))
            return remove_indices(entries, ())
        indices, reason = validate_indices(value, len(entries))
        if indices is None:
            warnings.append(self._warning("on_overflow", f"{reason}; the whole answer is ignored"))
            return remove_indices(entries, ())
        removal = remove_indices(entries, indices)
        self._entries.keep_only(removal.remaining)
        return removal

    @property
    def evictable(self) -> bool:
        """Whether window-level eviction may touch this region (non-persistent, not reject)."""
        return not self.persistent and self.admission != "reject"

    async def overflow_drop(self, needed: int) -> EvictReport:
        """Phase 1.5 for this region: let ``on_overflow`` choose drops for ``needed`` tokens."""
        async with self._lock:
            return await self._overflow_drop(needed)

    async def _overflow_drop(self, needed: int) -> EvictReport:
        warnings: list[RegionWarning] = []
        script = self.script
        if not self._entries or needed <= 0 or script is None or not script.has_on_overflow:
            return EvictReport()
        removal = await self._overflow(needed, warnings)
        return EvictReport(removal.freed, removal.removed, tuple(warnings))

    def drop_oldest_group(self) -> tuple[Entry, ...]:
        """Phase 2 step: remove the oldest turn group (an assistant turn with its results)."""
        return self._entries.drop_oldest(oldest_group_size(self._entries.snapshot()))

    async def evict(self, needed_tokens: int) -> EvictReport:
        """Window-level eviction of ``needed_tokens`` from this region alone (phases 1.5 and 2).

        A persistent or ``reject`` region is never evicted.  When the script's
        own drops cover the need, nothing more goes (its retention choice is
        honoured); otherwise oldest turn groups make up the difference.
        """
        if not self.evictable:
            reason = "persistent" if self.persistent else 'admission = "reject"'
            note = RegionWarning(self.name, "evict", f"region is {reason}; never evicted")
            return EvictReport(0, (), (note,))
        async with self._lock:
            first = await self._overflow_drop(needed_tokens)
            if first.freed > 0 and first.freed >= needed_tokens:
                return first
            dropped, freed = list(first.dropped), first.freed
            while freed < needed_tokens and self._entries:
                group = self.drop_oldest_group()
                dropped.extend(group)
                freed += sum(entry.tokens for entry in group)
        return EvictReport(freed, tuple(dropped), first.warnings)

    # -- render (docs/scripts/regions.md#renderctx) ------------------------------------------------

    async def render(self, meta: RenderMeta | None = None) -> RenderReport:
        """Run ``render`` and interpret it; any failure yields the fallback block.

        Without ``meta`` the script sees the plain-``assemble()`` defaults and
        a window made of this region alone.
        """
        if meta is None:
            meta = RenderMeta(window_total_tokens=self.current_tokens, window_max_tokens=self.budget)
        async with self._lock:
            entries = self._entries.snapshot()
            if self._runner is None:
                return self._fallback(entries, "no compiled script for this region")
            value, cause = await self._call("render", render_ctx(self.state(), self._entries.ctxs(), meta))
        if cause is not None:
            return self._fallback(entries, cause)
        try:
            output = interpret_render(value, persistent=self.persistent)
        except InvalidShape as exc:
            return self._fallback(entries, f"invalid shape: {exc}")
        warnings: tuple[RegionWarning, ...] = ()
        cost = render_cost(output.system, output.messages)
        if cost > self.budget:  # a warning only, as the reference's: the exact-count guard is the hard one
            note = (
                f"render exceeds its budget (~{cost} tokens > {self.budget}); sending anyway"
                " (enable exact_token_counting for a hard guard)"
            )
            warnings = (self._warning("render", note),)
        return RenderReport(output, False, warnings)

    def _fallback(self, entries: tuple[Entry, ...], cause: str) -> RenderReport:
        shown = "showing the fallback block" if entries else "region is empty, nothing shown"
        output = RenderOutput(fallback_blocks(self.name, entries, self.volatility))
        return RenderReport(output, True, (self._warning("render", f"{cause}; {shown}"),))

    # -- plumbing -------------------------------------------------------------

    async def _call(self, hook: str, ctx: dict[str, Any]) -> tuple[Any, str | None]:
        """Run a hook; returns ``(json_value, None)`` or ``(None, cause)``."""
        assert self._runner is not None
        outcome = await self._runner.run_hook(hook, ctx)
        if not outcome.ok:
            return None, outcome.cause or "hook failed"
        try:
            return plain_json(outcome.value), None
        except TypeError as exc:
            return None, f"returned a value with no JSON form ({exc})"

    def _warning(self, hook: str, cause: str) -> RegionWarning:
        script = self.script
        warning = RegionWarning(
            self.name,
            hook,
            cause,
            None if script is None else script.path,
            None if script is None else script.sha256,
        )
        _log.warning(
            "%s (tenant %s)", warning, self.tenant, extra={"region": self.name, "tenant": self.tenant}
        )
        return warning

    def __repr__(self) -> str:
        script = self.script
        label = "no script" if script is None else f"{script.path}@{script.short_hash}"
        return f"<Region {self.name!r} {label} {self.current_tokens}/{self.budget} tokens>"
