"""The region runtime's exceptions, one module so the package's part of the tree reads in one place::

    RhaipoolError (proto.errors)
    ├── RegionLoadError        a hard load-time error: nothing runs (§1.2 step 5)
    ├── RegionWriteError       ``WriteReport.raise_for_error``: the region refused a write
    ├── BudgetExceeded         the entry does not fit the region's own budget (``TokenBudgetExceeded``)
    ├── RegionFull             a non-empty ``admission = "reject"`` region refused a write
    ├── PinnedOverBudget       pinned regions alone exceed the window
    └── InvalidShape           a render value breaks the §1.6 grammar (also a ``ValueError``)

Messages are the reference runtime's, word for word, where it has one.
"""

from __future__ import annotations

from proto.errors import RhaipoolError

__all__ = [
    "BudgetExceeded",
    "InvalidShape",
    "PinnedOverBudget",
    "RegionFull",
    "RegionLoadError",
    "RegionWriteError",
]


class RegionLoadError(RhaipoolError):
    """A hard load-time error: nothing runs, no tokens are spent (§1.2 step 5)."""


class RegionWriteError(RhaipoolError):
    """Raised by ``WriteReport.raise_for_error`` for a write the region refused."""


class BudgetExceeded(RhaipoolError):
    """``TokenBudgetExceeded``: the entry does not fit the region's own budget."""

    def __init__(self, used: int, budget: int) -> None:
        super().__init__(f"Content exceeds token budget: {used} > {budget}")
        self.used = used
        self.budget = budget


class RegionFull(RhaipoolError):
    """``RegionFull``: a non-empty ``admission = "reject"`` region refused a write."""

    def __init__(self, name: str, held: int, budget: int) -> None:
        super().__init__(
            f"Region '{name}' is full ({held}/{budget} tokens) and does not evict automatically"
            " - release an entry before adding another"
        )
        self.name = name


class PinnedOverBudget(RhaipoolError):
    """Pinned, compact-history and persistent custom regions alone exceed the window."""

    def __init__(self, pinned: int, budget: int) -> None:
        super().__init__(f"Pinned regions ({pinned}) exceed total budget ({budget})")
        self.pinned = pinned
        self.budget = budget


class InvalidShape(RhaipoolError, ValueError):
    """The render value breaks the §1.6 grammar; ``str(exc)`` says where (still a ``ValueError``)."""
