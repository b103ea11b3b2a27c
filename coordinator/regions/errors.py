"""The region family: every exception of the region runtime, under ``RegionError``.

A hard load-time error (``RegionLoadError``: nothing runs), a refused write (``RegionWriteError``
from ``WriteReport.raise_for_error``, ``BudgetExceeded``, ``RegionFull``), a window whose pinned
regions alone exceed it (``PinnedOverBudget``), and a render value outside the grammar
(``InvalidShape``, also a ``ValueError``). The README draws the tree.

Messages are the reference runtime's, word for word, where it has one.
"""

from __future__ import annotations

from proto.errors import RhaipoolError

__all__ = [
    "BudgetExceeded",
    "InvalidShape",
    "PinnedOverBudget",
    "RegionError",
    "RegionFull",
    "RegionLoadError",
    "RegionWriteError",
]


class RegionError(RhaipoolError):
    """The root of the region family: a region could not be loaded, written, rendered or assembled."""


class RegionLoadError(RegionError):
    """A hard load-time error: nothing runs, no tokens are spent (docs/scripts/regions.md#loading)."""


class RegionWriteError(RegionError):
    """Raised by ``WriteReport.raise_for_error`` for a write the region refused."""


class BudgetExceeded(RegionError):
    """``TokenBudgetExceeded``: the entry does not fit the region's own budget."""

    def __init__(self, used: int, budget: int) -> None:
        super().__init__(f"Content exceeds token budget: {used} > {budget}")
        self.used = used
        self.budget = budget


class RegionFull(RegionError):
    """``RegionFull``: a non-empty ``admission = "reject"`` region refused a write."""

    def __init__(self, name: str, held: int, budget: int) -> None:
        super().__init__(
            f"Region '{name}' is full ({held}/{budget} tokens) and does not evict automatically"
            " - release an entry before adding another"
        )
        self.name = name


class PinnedOverBudget(RegionError):
    """Pinned, compact-history and persistent custom regions alone exceed the window."""

    def __init__(self, pinned: int, budget: int) -> None:
        super().__init__(f"Pinned regions ({pinned}) exceed total budget ({budget})")
        self.pinned = pinned
        self.budget = budget


class InvalidShape(RegionError, ValueError):
    """The render value breaks the render grammar (docs/scripts/regions.md#renderctx); ``str(exc)`` says where
    (still a ``ValueError``)."""
