"""Custom context regions (``kind = "custom"``): the reference runtime's contract, run in the pool.

A host loads a region script once, then writes, renders and evicts::

    async with Pool() as pool:
        region = await open_region(pool, "brain", "hooks/brain.rhai", budget=1000, base_dir=agent_dir)
        await region.write("ls -la output", 40, kind="tool_result", tool_call_id="c1", tool_name="shell")
        report = await region.render(RenderMeta(stage_name="plan", model="m1"))

Modules, one job each: ``errors`` (every exception of the package), ``model`` (entries, blocks,
messages), ``tokens`` (estimates), ``render`` (the render grammar and its fallback), ``writes``
(``on_write`` answers), ``eviction`` (``on_overflow`` indices), ``assembly`` (the window after every
region rendered), ``hooks`` (runner seam and ctx shapes), ``runtime`` (``Region``), ``window``
(whole-window eviction and assembly), ``loading`` (load-time checks and the pool runner), ``resident``
(entries kept in the worker: hooks ship only what changed), ``scenario`` (``rhaipool test``), ``cli``
(click commands). The contract a hook author writes against is docs/scripts/regions.md.
"""

from __future__ import annotations

from coordinator.regions.assembly import AssembledRequest, RegionOutput, assemble
from coordinator.regions.errors import (
    BudgetExceeded,
    InvalidShape,
    PinnedOverBudget,
    RegionError,
    RegionFull,
    RegionLoadError,
    RegionWriteError,
)
from coordinator.regions.hooks import HookOutcome, HookRunner, RenderMeta, ScriptInfo
from coordinator.regions.loading import DEFAULT_HOOK_TIMEOUT, PoolHookRunner, RegionLoader, open_region
from coordinator.regions.model import Entry, Message, SystemBlock, ToolCall
from coordinator.regions.reports import EvictReport, RegionWarning, RenderReport, WriteReport
from coordinator.regions.runtime import Region
from coordinator.regions.window import BuiltinRegion, Window, WindowEviction

__all__ = [
    "DEFAULT_HOOK_TIMEOUT",
    "AssembledRequest",
    "BudgetExceeded",
    "BuiltinRegion",
    "Entry",
    "EvictReport",
    "HookOutcome",
    "HookRunner",
    "InvalidShape",
    "Message",
    "PinnedOverBudget",
    "PoolHookRunner",
    "Region",
    "RegionError",
    "RegionFull",
    "RegionLoadError",
    "RegionLoader",
    "RegionOutput",
    "RegionWarning",
    "RegionWriteError",
    "RenderMeta",
    "RenderReport",
    "ScriptInfo",
    "SystemBlock",
    "ToolCall",
    "Window",
    "WindowEviction",
    "WriteReport",
    "assemble",
    "open_region",
]
