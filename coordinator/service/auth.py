"""Bearer tokens → tenants. The tenant of a request comes from its token alone, never from its body.

Tokens are compared by their sha256 (what the config stores), looked up in a dict that a reload swaps
whole, so rotating a token is one config edit and a SIGHUP (or ``POST /api/admin/reload``), no restart.
A snapshot remembers the tokens it has accepted (only those: at most one per tenant and the admin's,
so unknown tokens cannot grow it), so a known token costs a dict lookup instead of a sha256 per call;
a new snapshot starts empty, so a revoked token is forgotten with the reload that revokes it.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

__all__ = ["ADMIN", "METRICS", "Tokens", "token_sha256"]

ADMIN = object()
"""What :meth:`Tokens.identify` answers for the admin token."""
METRICS = object()
"""What :meth:`Tokens.identify` answers for the metrics token (it may read ``/metrics``, nothing else)."""


def token_sha256(token: str) -> str:
    """The hex sha256 the config stores for ``token``."""
    return hashlib.sha256(token.encode()).hexdigest()


class Tokens:
    """One snapshot of who may call (a reload makes a new one): tenant tokens by hash, the admin's hash."""

    def __init__(self, tenants: Mapping[str, str], admin_sha256: str | None) -> None:
        self._by_hash = {sha: tenant for tenant, sha in tenants.items()}
        self._admin = admin_sha256
        self._reader: str | None = None
        self._accepted: dict[str, str | object] = {}
        self.tenants = frozenset(tenants)

    def add_reader(self, sha256: str | None) -> None:
        """The metrics token's hash (``[serve] metrics_token_sha256``), if any."""
        self._reader = sha256

    def identify(self, authorization: str | None) -> str | object | None:
        """The tenant id, :data:`ADMIN`, or None for a missing, malformed or unknown token."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        token = token.strip()
        known = self._accepted.get(token)
        if known is not None:
            return known
        digest = token_sha256(token)
        who: str | object | None = self._by_hash.get(digest)
        if self._admin is not None and hmac.compare_digest(digest, self._admin):
            who = ADMIN
        elif self._reader is not None and hmac.compare_digest(digest, self._reader):
            who = METRICS
        if who is not None and len(self._accepted) <= len(self._by_hash) + 1:
            self._accepted[token] = who
        return who
