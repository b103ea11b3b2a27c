"""Token counts the coordinator computes itself: the fallback when a script has no usable ``count_tokens``.

By model id prefix (docs/scripts/providers.md#count_tokensstate-text-model): ``gpt-``/``o3-``/``o4-`` →
tiktoken with the model's BPE, else cl100k_base (the ``tiktoken-rs`` crate inside our binding, the reference's
own tokenizer: its model table decides the BPE, and its ranks are embedded, so this works offline);
``claude-`` → ceil(bytes/3.5) in f32; ``gemini-`` and anything else → ceil(bytes/4). The arithmetic and the
tiktoken counter are ``contract.tokens``, the same the worker's ``count_tokens_heuristic`` runs; this
module only maps a model id to a family.
"""

from __future__ import annotations

from contract.tokens import Family, estimate, quarter_bytes

__all__ = ["count_by_model", "estimate_bytes", "family_for"]

estimate_bytes = quarter_bytes
"""The generic estimate: ceil(UTF-8 bytes / 4)."""


def family_for(model: str) -> Family:
    """Which counting rule a model id gets (by prefix, as the reference decides)."""
    if model.startswith(("gpt-", "o3-", "o4-")):
        return Family.OPENAI
    if model.startswith("claude-"):
        return Family.ANTHROPIC
    return Family.OTHER


def count_by_model(text: str, model: str) -> int:
    """The heuristic fallback for ``count_tokens(text, model)``."""
    return estimate(text, family_for(model), model)
