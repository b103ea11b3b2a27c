"""Circuit breaker for scripts that keep killing workers: strikes in a window → quarantine."""

from __future__ import annotations

from collections import deque

from coordinator._core.config import RetryPolicy

__all__ = ["Quarantine"]


class Quarantine:
    """Counts worker deaths attributed to each script (by sha256); pure bookkeeping, time passed in."""

    def __init__(self, policy: RetryPolicy) -> None:
        self._policy = policy
        self._strikes: dict[str, deque[float]] = {}
        self._until: dict[str, tuple[float, str]] = {}

    def strike(self, sha: str, now: float, cause: str) -> bool:
        """Record one death; ``True`` if the script is now quarantined."""
        strikes = self._strikes.setdefault(sha, deque())
        strikes.append(now)
        while strikes and strikes[0] < now - self._policy.window:
            strikes.popleft()
        if len(strikes) >= self._policy.strikes:
            self._until[sha] = (now + self._policy.quarantine, cause)
            strikes.clear()
            return True
        return False

    def check(self, sha: str, now: float) -> tuple[float, str] | None:
        """``(until, last cause)`` while quarantined, else ``None``."""
        entry = self._until.get(sha)
        if entry is None:
            return None
        if entry[0] <= now:
            del self._until[sha]
            return None
        return entry

    def __len__(self) -> int:
        return len(self._until)
