"""The seam between the region runtime and whatever runs a hook (docs/scripts/regions.md#how-a-hook-is-called,
docs/scripts/regions.md#renderctx).

The runtime never calls the pool directly: it asks a ``HookRunner`` for an
outcome and builds the exact ``ctx`` shapes the reference hands its hooks.
Every failure a runner can meet -- a throw, a limit, a deadline, a lost
worker -- arrives as a ``HookOutcome`` with ``ok=False``: the runtime treats
them all like a hook that threw (docs/scripts/regions.md#how-a-hook-is-called).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from operator import is_
from typing import Any, Protocol, cast

from coordinator.regions.model import Entry, to_rhai_json

__all__ = [
    "HookOutcome",
    "HookRunner",
    "RegionState",
    "RenderMeta",
    "ScriptInfo",
    "entry_ctx",
    "on_overflow_ctx",
    "on_write_ctx",
    "render_ctx",
    "reuse_entry_ctxs",
]


@dataclass(frozen=True, slots=True)
class ScriptInfo:
    """Identity of a loaded region script, as named in warnings."""

    path: str
    sha256: str
    has_on_write: bool
    has_on_overflow: bool

    @property
    def short_hash(self) -> str:
        """The first 12 hex digits: enough to tell two versions apart in a log."""
        return self.sha256[:12]


@dataclass(frozen=True, slots=True)
class HookOutcome:
    """One hook call's result: a JSON value, or the cause of its failure."""

    ok: bool
    value: Any = None
    cause: str = ""

    @classmethod
    def success(cls, value: Any) -> HookOutcome:
        """A hook that returned ``value`` (already plain JSON)."""
        return cls(True, value)

    @classmethod
    def failure(cls, cause: str) -> HookOutcome:
        """A hook that threw, hit a limit, missed its deadline or lost its worker."""
        return cls(False, None, cause)


class HookRunner(Protocol):
    """Runs one hook of one loaded region script."""

    @property
    def script(self) -> ScriptInfo:
        """The script this runner calls."""
        ...

    async def run_hook(self, hook: str, ctx: dict[str, Any]) -> HookOutcome:
        """Call ``hook(ctx)``; never raises for anything the script did."""
        ...


@dataclass(frozen=True, slots=True)
class RenderMeta:
    """Live-run facts a render sees (docs/scripts/regions.md#renderctx); the defaults are a plain
    ``assemble()``."""

    stage_name: str = ""
    stage_iterations: int = 0
    model: str = ""
    window_total_tokens: int = 0
    window_max_tokens: int = 0


@dataclass(frozen=True, slots=True)
class RegionState:
    """The ``ctx.region`` sub-object, computed before the operation."""

    name: str
    budget: int
    current_tokens: int
    entry_count: int

    def to_json(self) -> dict[str, Any]:
        """``{name, budget, current_tokens, entry_count}``."""
        return {
            "name": self.name,
            "budget": self.budget,
            "current_tokens": self.current_tokens,
            "entry_count": self.entry_count,
        }


def entry_ctx(entry: Entry) -> dict[str, Any]:
    """One entry as hooks see it (docs/scripts/regions.md#renderctx), ready for Rhai."""
    ctx: dict[str, Any] = to_rhai_json(entry.to_ctx())
    return ctx


def reuse_entry_ctxs(
    old: Sequence[Entry], ctxs: list[dict[str, Any]], entries: Sequence[Entry]
) -> list[dict[str, Any]]:
    """``entries``' ctx dicts, reusing ``ctxs`` (those of ``old``) for the entries still there.

    An unchanged or appended-to list is recognised by identity at C speed (and
    an unchanged one gets ``ctxs`` itself back, so the resident deltas see "no
    change" without comparing again); any other change costs one C-speed dict
    lookup per entry.  ``old`` holds its entries alive, so an id found there is
    that very entry.  ``ctxs`` is never changed: a new list is returned.
    """
    kept = len(old)
    if len(entries) >= kept and all(map(is_, old, entries)):
        return ctxs + list(map(entry_ctx, entries[kept:])) if len(entries) > kept else ctxs
    lookup: Callable[[int], dict[str, Any] | None] = dict(zip(map(id, old), ctxs, strict=True)).get
    found = list(map(lookup, map(id, entries)))
    fresh = -1
    with contextlib.suppress(ValueError):  # ``index`` raises once no entry is left to build
        while True:
            fresh = found.index(None, fresh + 1)
            found[fresh] = entry_ctx(entries[fresh])
    return cast(list[dict[str, Any]], found)


def _as_list(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """A list is passed as is, not copied (hook runners never change a ctx; callers cache both)."""
    return entries if type(entries) is list else list(entries)


def render_ctx(region: RegionState, entries: Sequence[dict[str, Any]], meta: RenderMeta) -> dict[str, Any]:
    """The ``render(ctx)`` argument; ``entries`` are ``entry_ctx`` dicts (callers may cache them)."""
    return {
        "region": region.to_json(),
        "entries": _as_list(entries),
        "stage_name": meta.stage_name,
        "stage_iterations": meta.stage_iterations,
        "model": meta.model,
        "window": {"total_tokens": meta.window_total_tokens, "max_tokens": meta.window_max_tokens},
    }


def on_write_ctx(region: RegionState, entry: Entry) -> dict[str, Any]:
    """The ``on_write(ctx)`` argument: no key, no stage and no window fields (R7)."""
    return {
        "region": region.to_json(),
        "entry": {"content": entry.content, "kind": entry.kind, "tokens": entry.tokens},
    }


def on_overflow_ctx(
    region: RegionState, entries: Sequence[dict[str, Any]], needed_tokens: int
) -> dict[str, Any]:
    """The ``on_overflow(ctx)`` argument; ``entries`` are ``entry_ctx`` dicts."""
    return {
        "region": region.to_json(),
        "entries": _as_list(entries),
        "needed_tokens": needed_tokens,
    }
