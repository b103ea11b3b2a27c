"""``ScriptHandle``: what ``Pool.load`` returns, usable for the pool's lifetime and across worker deaths."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

from proto import Kind

__all__ = ["ScriptHandle", "sha256_of"]


def sha256_of(source: str) -> str:
    """Scripts are content-addressed by the sha256 of their UTF-8 source."""
    return hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True, slots=True)
class ScriptHandle:
    """A loaded script: identity (``sha256``), ``name``, ``kind`` and public ``functions``.

    The source stays here (coordinator side) so any worker that lacks the AST can
    be sent it again, e.g. after the worker that compiled it died.
    """

    sha256: str
    name: str
    kind: Kind
    functions: tuple[tuple[str, int], ...]
    source: str = field(repr=False)

    def has_function(self, name: str, arity: int) -> bool:
        return (name, arity) in self.functions
