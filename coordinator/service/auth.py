"""Bearer tokens → tenants. The tenant of a request comes from its token alone, never from its body.

Tokens are compared by their sha256 (what the config stores), looked up in a dict that a reload swaps
whole, so rotating a token is one config edit and a SIGHUP (or ``POST /api/admin/reload``), no restart.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping

__all__ = ["ADMIN", "Tokens", "token_sha256"]

ADMIN = object()
"""What :meth:`Tokens.identify` answers for the admin token."""


def token_sha256(token: str) -> str:
    """The hex sha256 the config stores for ``token``."""
    return hashlib.sha256(token.encode()).hexdigest()


class Tokens:
    """One immutable snapshot of who may call: tenant tokens by hash, and the admin token's hash."""

    def __init__(self, tenants: Mapping[str, str], admin_sha256: str | None) -> None:
        self._by_hash = {sha: tenant for tenant, sha in tenants.items()}
        self._admin = admin_sha256
        self.tenants = frozenset(tenants)

    def identify(self, authorization: str | None) -> str | object | None:
        """The tenant id, :data:`ADMIN`, or None for a missing, malformed or unknown token."""
        if not authorization:
            return None
        scheme, _, token = authorization.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return None
        digest = token_sha256(token.strip())
        if self._admin is not None and hmac.compare_digest(digest, self._admin):
            return ADMIN
        return self._by_hash.get(digest)
