"""Tenants' provider tables at rest: sealed with a key the operator supplies, never stored in clear.

A table a tenant sets over ``PUT /api/providers/{name}/config`` may carry secret values (its
``api_key``, its ``env`` entries). The database holds it sealed with Fernet (AES-128-CBC and
HMAC-SHA256, from the ``cryptography`` package) under the key in ``[serve] secrets_key_file`` or, when
that is not set, the ``RHAIPOOL_SECRETS_KEY`` environment variable; a copy of the database file alone
reveals nothing. The file may hold several keys, one per line: the first seals, every one opens
(``MultiFernet``). To rotate, put the new key first and restart: every stored table is sealed again
with it at start-up (:meth:`Sealer.reseal`), after which the old key can go. Without a key, a table
holding a secret value is refused (nothing is stored in clear), and a table without one is stored as
it is.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Final

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from coordinator.service.errors import SecretsUnavailable, ServiceConfigError

__all__ = ["KEY_ENV", "Sealer", "SecretsUnavailable"]

KEY_ENV: Final = "RHAIPOOL_SECRETS_KEY"
_SEALED: Final = "fernet:"
_PLAIN: Final = "plain:"


class Sealer:
    """Seals and opens provider tables with one key (or refuses to hold secrets without one)."""

    def __init__(self, keys: list[bytes] | None) -> None:
        self._keys = len(keys or ())
        self._fernet = None if not keys else MultiFernet([Fernet(k) for k in keys])

    @classmethod
    def from_key_file(cls, path: Path | None) -> Sealer:
        """The sealer of ``[serve] secrets_key_file`` (else ``$RHAIPOOL_SECRETS_KEY``, else none)."""
        try:
            text = path.read_text(encoding="ascii").strip() if path is not None else os.environ.get(KEY_ENV)
        except (OSError, UnicodeDecodeError) as exc:
            raise ServiceConfigError(f"[serve] secrets_key_file: cannot read {path}: {exc}") from exc
        if not text:
            return cls(None)
        try:
            return cls([line.strip().encode() for line in text.splitlines() if line.strip()])
        except ValueError:
            raise ServiceConfigError(
                "[serve] secrets_key_file must hold Fernet keys, one per line (32 url-safe base64 bytes: "
                "python -c 'from cryptography.fernet import Fernet; print(Fernet.generate_key().decode())')"
            ) from None

    @property
    def can_seal(self) -> bool:
        """Whether a key is configured."""
        return self._fernet is not None

    def seal(self, table: dict[str, Any], *, secret: bool) -> str:
        """The text to store; ``secret`` tables need a key (:class:`SecretsUnavailable` otherwise)."""
        text = json.dumps(table, sort_keys=True)
        if self._fernet is not None:
            return _SEALED + self._fernet.encrypt(text.encode()).decode("ascii")
        if secret:
            raise SecretsUnavailable(
                "the operator has configured no secrets key ([serve] secrets_key_file), so a provider "
                "table with secret values cannot be stored"
            )
        return _PLAIN + text

    def reseal(self, sealed: str) -> str | None:
        """``sealed`` sealed again with the first key, or None when it needs nothing (one key, or plain)."""
        if self._fernet is None or not sealed.startswith(_SEALED) or self._keys < 2:
            return None
        try:
            token = self._fernet.rotate(sealed[len(_SEALED) :].encode())
        except InvalidToken:
            raise SecretsUnavailable("a sealed provider table opens with none of these keys") from None
        return _SEALED + token.decode("ascii")

    def open(self, sealed: str) -> dict[str, Any]:
        """The table back; :class:`SecretsUnavailable` when it cannot be opened with this key."""
        if sealed.startswith(_PLAIN):
            table: dict[str, Any] = json.loads(sealed[len(_PLAIN) :])
            return table
        if self._fernet is None:
            raise SecretsUnavailable("a sealed provider table needs [serve] secrets_key_file to be opened")
        try:
            opened: dict[str, Any] = json.loads(self._fernet.decrypt(sealed[len(_SEALED) :].encode()))
        except (InvalidToken, ValueError):
            raise SecretsUnavailable("a sealed provider table does not open with this secrets key") from None
        return opened
