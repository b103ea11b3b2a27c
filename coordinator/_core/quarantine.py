"""Circuit breaker for scripts — and tenants — that keep killing workers.

A worker death blamed on a call (``outcomes.blame``) is one *strike*, counted twice:

- against the script **as that tenant runs it** (``(tenant, sha256)``): ``strikes`` within ``window``
  quarantine that script for that tenant.  Keyed by tenant so one tenant feeding hostile input to a
  popular script cannot get it quarantined for everybody else.
- against the **tenant**, whatever script it ran: ``tenant_strikes`` (by default twice ``strikes``,
  so one bad script does not take a tenant's good ones down with it) within ``window`` quarantine
  every call of the tenant.  Editing the script (``// variant N``) changes its sha256 and so resets
  the per-script count, but not this one.

A tenant with any strike in the last ``window`` seconds is an *offender*: the dispatcher places its
calls only on workers that hold no other tenant's calls, so its next crash costs nobody else.  Being
clean for ``window`` seconds ends that.  Everything here is pure bookkeeping with time passed in, and
bounded: entries whose strikes have all left the window are pruned.
"""

from __future__ import annotations

from collections import deque

from coordinator._core.config import RetryPolicy
from coordinator.tenancy import DEFAULT_TENANT

__all__ = ["DEFAULT_TENANT", "Quarantine"]


class _Breaker:
    """Strikes per key in a sliding window; ``threshold`` of them trip a timed quarantine."""

    def __init__(self, threshold: int, window: float, duration: float) -> None:
        self._threshold, self._window, self._duration = threshold, window, duration
        self._strikes: dict[object, deque[float]] = {}
        self.until: dict[object, tuple[float, str]] = {}
        """Quarantines by key: (until, cause); an expired one stays until ``check`` or ``prune``."""

    def strike(self, key: object, now: float, cause: str) -> bool:
        strikes = self._strikes.setdefault(key, deque())
        strikes.append(now)
        self._expire(key, strikes, now)
        if len(strikes) >= self._threshold:
            self.until[key] = (now + self._duration, cause)
            del self._strikes[key]
            return True
        return False

    def _expire(self, key: object, strikes: deque[float], now: float) -> None:
        while strikes and strikes[0] <= now - self._window:
            strikes.popleft()
        if not strikes:
            self._strikes.pop(key, None)

    def check(self, key: object, now: float) -> tuple[float, str] | None:
        entry = self.until.get(key)
        if entry is None:
            return None
        if entry[0] <= now:
            del self.until[key]
            return None
        return entry

    def prune(self, now: float) -> None:
        for key, strikes in list(self._strikes.items()):
            self._expire(key, strikes, now)
        for key in list(self.until):
            self.check(key, now)

    def __len__(self) -> int:
        return len(self.until)


class Quarantine:
    """Worker deaths counted per (tenant, script) and per tenant; see the module docstring."""

    def __init__(self, policy: RetryPolicy, *, tenant_strikes: int | None = None) -> None:
        self._window = policy.window
        self._scripts = _Breaker(policy.strikes, policy.window, policy.quarantine)
        tenant_threshold = tenant_strikes or policy.tenant_strikes or 2 * policy.strikes
        self._tenants = _Breaker(tenant_threshold, policy.window, policy.quarantine)
        self._offenders: dict[str, float] = {}

    def strike(self, sha: str, now: float, cause: str, *, tenant: str = DEFAULT_TENANT) -> bool:
        """Record one death blamed on ``tenant``'s call of ``sha``; ``True`` if either is now quarantined."""
        self._offenders[tenant] = now + self._window
        script_out = self._scripts.strike((tenant, sha), now, cause)
        tenant_out = self._tenants.strike(tenant, now, f"tenant {tenant!r}: {cause}")
        return script_out or tenant_out

    def check(self, sha: str, now: float, *, tenant: str = DEFAULT_TENANT) -> tuple[float, str] | None:
        """``(until, last cause)`` while the tenant or its copy of the script is
        quarantined, else ``None``."""
        if not self._scripts.until and not self._tenants.until:
            return None  # the common case: asked for every call submitted
        return self._scripts.check((tenant, sha), now) or self._tenants.check(tenant, now)

    def offender(self, tenant: str, now: float) -> bool:
        """Has ``tenant`` killed a worker within the window?  Its calls then run apart from others'."""
        until = self._offenders.get(tenant)
        if until is None:
            return False
        if until <= now:
            del self._offenders[tenant]
            return False
        return True

    def prune(self, now: float) -> None:
        """Forget strikes and quarantines that are over (keeps the bookkeeping bounded)."""
        self._scripts.prune(now)
        self._tenants.prune(now)
        for tenant in list(self._offenders):
            self.offender(tenant, now)

    @property
    def offenders(self) -> int:
        return len(self._offenders)

    def __len__(self) -> int:
        """Quarantines in force (scripts and tenants)."""
        return len(self._scripts) + len(self._tenants)
