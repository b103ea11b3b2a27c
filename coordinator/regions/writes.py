"""What an ``on_write`` answer means (docs/scripts/regions.md#on_writectx) and the write-time budget rule
(docs/scripts/regions.md#on_overflowctx).

Pure decisions only; the runtime performs them.  The decision type has room
for a reject reason so the reference's later upstream semantics can be added
without changing the shape of a write report.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from coordinator.regions.errors import BudgetExceeded, RegionFull
from coordinator.regions.tokens import estimate_tokens

__all__ = [
    "BudgetExceeded",
    "RegionFull",
    "WriteDecision",
    "interpret_on_write",
    "over_budget",
]

WriteAction = Literal["accept", "replace", "drop"]


@dataclass(frozen=True, slots=True)
class WriteDecision:
    """What to do with one entry headed into a region.

    ``warning`` is set when the hook answered with something the contract does
    not define (it is then accepted unchanged).  ``reason`` is reserved for a
    future reject-with-reason answer (upstream's) and is always ``None`` today.
    """

    action: WriteAction
    content: str | None = None
    tokens: int | None = None
    warning: str | None = None
    reason: str | None = None


def interpret_on_write(value: Any) -> WriteDecision:
    """Map the hook's return value (plain JSON) to a decision.

    A string replaces the content, re-estimated at ``ceil(bytes / 4)`` (so
    ``""`` stores 0 tokens); ``true`` or ``()`` accepts; ``false`` silently
    drops; anything else accepts unchanged with a warning.
    """
    if isinstance(value, str):
        return WriteDecision("replace", value, estimate_tokens(value))
    if value is True or value is None:
        return WriteDecision("accept")
    if value is False:
        return WriteDecision("drop")
    kind = type(value).__name__
    return WriteDecision("accept", warning=f"on_write returned a value of type {kind}; accepted unchanged")


def over_budget(current: int, incoming: int, budget: int) -> int:
    """Tokens missing for the write to fit; 0 when it fits (``current + incoming <= budget``)."""
    return max(0, current + incoming - budget)
