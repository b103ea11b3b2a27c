"""What each region operation reports back to the host (docs/scripts/scenarios.md#the-file shapes).

A write, render or eviction never raises for anything a script did; it returns
one of these reports, with warnings that name the region, the script, its
hash and the cause -- the information an operator needs to find the culprit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from coordinator.regions.assembly import RegionOutput
from coordinator.regions.errors import RegionWriteError
from coordinator.regions.model import Entry, Message, SystemBlock
from coordinator.regions.render import RenderOutput

__all__ = [
    "EvictReport",
    "RegionWarning",
    "RegionWriteError",
    "RenderReport",
    "WriteReport",
]

WriteOutcome = Literal["accepted", "replaced", "dropped", "error"]


@dataclass(frozen=True, slots=True)
class RegionWarning:
    """One thing that went wrong in a hook, or a budget note, for one region."""

    region: str
    hook: str
    cause: str
    script: str | None = None
    sha256: str | None = None

    def __str__(self) -> str:
        if self.script is None:
            where = f"region '{self.region}'"
        else:
            where = f"region '{self.region}' (script {self.script}, sha256 {(self.sha256 or '?')[:12]})"
        return f"{where}: {self.hook}: {self.cause}"


@dataclass(frozen=True, slots=True)
class WriteReport:
    """Outcome of one write or replace.

    ``entry`` is what was stored (or, for ``error``, what the write tried to
    store); ``dropped_indices`` are the entries a write-time ``on_overflow``
    removed, as indices into the entries before the drop.
    """

    op: Literal["write", "replace"]
    outcome: WriteOutcome
    entry: Entry | None = None
    dropped_indices: tuple[int, ...] = ()
    error: str | None = None
    error_kind: Literal["TokenBudgetExceeded", "RegionFull"] | None = None
    warnings: tuple[RegionWarning, ...] = ()

    @property
    def ok(self) -> bool:
        """False only when the region refused the entry (a drop is a success)."""
        return self.outcome != "error"

    def raise_for_error(self) -> None:
        """Raise ``RegionWriteError`` when the write failed, as the reference returns ``Err``."""
        if self.error is not None:
            raise RegionWriteError(self.error)

    def to_json(self) -> dict[str, Any]:
        """The step shape of a scenario's output (docs/scripts/scenarios.md#output)."""
        stored = self.entry if self.outcome != "dropped" else None
        return {
            "op": self.op,
            "outcome": self.outcome,
            "content": None if stored is None else stored.content,
            "tokens": None if stored is None else stored.tokens,
            "dropped_indices": list(self.dropped_indices),
            "error": self.error,
            "warnings": [str(w) for w in self.warnings],
        }


@dataclass(frozen=True, slots=True)
class RenderReport:
    """Outcome of one render: blocks and preamble messages, and whether it fell back."""

    output: RenderOutput
    fallback: bool = False
    warnings: tuple[RegionWarning, ...] = ()

    @property
    def system(self) -> tuple[SystemBlock, ...]:
        """System blocks, in the order the script returned them."""
        return self.output.system

    @property
    def messages(self) -> tuple[Message, ...]:
        """Preamble messages (wire shapes), before assembly."""
        return self.output.messages

    def as_region_output(self) -> RegionOutput:
        """This render as an input to ``assemble`` (a custom region: a preamble)."""
        return RegionOutput(self.output.system, self.output.messages, preamble=True)

    def to_json(self) -> dict[str, Any]:
        """The step shape of a scenario's output (docs/scripts/scenarios.md#output)."""
        return {
            "op": "render",
            "system": [block.to_json() for block in self.output.system],
            "messages": [message.to_json() for message in self.output.messages],
            "fallback": self.fallback,
            "warnings": [str(w) for w in self.warnings],
        }


@dataclass(frozen=True, slots=True)
class EvictReport:
    """Outcome of one eviction: tokens freed and the entries removed, oldest first."""

    freed: int = 0
    dropped: tuple[Entry, ...] = ()
    warnings: tuple[RegionWarning, ...] = ()

    def to_json(self) -> dict[str, Any]:
        """The step shape of a scenario's output (docs/scripts/scenarios.md#output)."""
        return {
            "op": "evict",
            "freed": self.freed,
            "dropped": [entry.content for entry in self.dropped],
            "warnings": [str(w) for w in self.warnings],
        }
