"""Where provider scripts come from when not from a directory: a tenant's scripts in the database.

The loader asks :meth:`ScriptSource.version` on every lookup (so it must be cheap, in memory) and
:meth:`ScriptSource.read` only when that version is not the one it has loaded; a cached provider is
reused while ``(version, configuration)`` is unchanged, exactly as ``(mtime, configuration)`` for a file.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

__all__ = ["ScriptSource"]


@runtime_checkable
class ScriptSource(Protocol):
    """One tenant's provider scripts by name (``ProviderRuntime(..., source=...)``)."""

    def version(self, name: str) -> str | None:
        """The script's version (its sha256), or None when there is no script of that name."""
        ...

    async def read(self, name: str) -> str | None:
        """The script's source text, or None when it is gone (it may read the database)."""
        ...
