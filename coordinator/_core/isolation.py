"""Finding the script that killed a worker which held several calls: run the suspects alone.

A worker that dies with one call running blames that call (``outcomes.blame``).  With several
running — provider calls share a worker while they wait on HTTP — the death is ambiguous, and no
script may be struck on suspicion: a hostile tenant could otherwise get a neighbour quarantined by
crashing beside it.  Instead each script that was running there becomes a *suspect*: its calls
(re-runs and new ones) run alone, on a worker holding nothing else, so its next crash has exactly
one call to blame and strikes the right script (``coordinator._core.quarantine``).  A suspect is cleared
after ``CLEAR_AFTER`` calls that finished alone without killing anything, or when the strike window
passes.  To keep a suspect from waiting forever on a busy pool, one worker is *reserved* for it:
nothing new is placed there until it is empty.
"""

from __future__ import annotations

from typing import Final

__all__ = ["CLEAR_AFTER", "Suspects"]

CLEAR_AFTER: Final = 3


class Suspects:
    """Scripts (by sha256) whose calls must run alone; pure bookkeeping, time passed in."""

    def __init__(self, window: float) -> None:
        self._window = window
        self._until: dict[str, float] = {}
        self._clean: dict[str, int] = {}

    def suspect(self, sha: str, now: float) -> None:
        """A worker died with this script among several running calls."""
        self._until[sha] = now + self._window
        self._clean[sha] = 0

    def isolate(self, sha: str, now: float) -> bool:
        """Must a call of this script run alone?"""
        until = self._until.get(sha)
        if until is None:
            return False
        if until <= now:
            self._forget(sha)
            return False
        return True

    def finished_alone(self, sha: str) -> None:
        """A call of this script ran alone and ended without killing its worker."""
        if sha in self._clean:
            self._clean[sha] += 1
            if self._clean[sha] >= CLEAR_AFTER:
                self._forget(sha)

    def _forget(self, sha: str) -> None:
        self._until.pop(sha, None)
        self._clean.pop(sha, None)

    def __len__(self) -> int:
        return len(self._until)
