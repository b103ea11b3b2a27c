"""The token estimates both sides compute, and the one tiktoken counter they share.

A provider script's ``count_tokens_heuristic`` runs in the worker; the coordinator's fallback for a
script without a usable ``count_tokens`` runs in the host.
docs/scripts/providers.md#count_tokensstate-text-model makes them the same arithmetic, and a region's
``count_tokens`` helper is the same ``ceil(bytes / 4)`` the coordinator budgets with
(docs/scripts/regions.md#budgets-and-token-estimates), so all of it lives here, below both, and
``tests/contract/test_tokens.py`` ties the callers to it.

The OpenAI rule is tiktoken's BPE as the ``tiktoken-rs`` crate computes it, the crate the reference
runtime counts with, compiled into our binding (``rhai.tiktoken_count``; its ranks are embedded, so it
works offline and in the sandbox): the model picks its BPE from tiktoken-rs's own model table, and a
model the table does not know counts in ``cl100k_base``, exactly as the reference's tokenizer does.
This is the one ``contract`` module that imports beyond the standard library and ``proto``, and it
imports ``rhai`` lazily, on the first count that needs it, so ``contract`` itself loads without the
binding.
"""

from __future__ import annotations

import enum
import math
import re
import struct

__all__ = [
    "OPENAI_HINT_MODEL",
    "Family",
    "estimate",
    "quarter_bytes",
    "third_and_a_half_bytes",
    "tiktoken_count",
    "utf8_size",
]

OPENAI_HINT_MODEL = "gpt-4"
"""The model the ``openai`` hint counts for (the reference maps the hint to ``gpt-4``: cl100k_base)."""

_SURROGATE = re.compile("[\ud800-\udfff]")


class Family(enum.StrEnum):
    """Which rule counts a text: the hint a script passes (``count_tokens_heuristic(text, hint)``)."""

    OPENAI = "openai"
    """tiktoken's BPE: the model's own, cl100k_base for a model tiktoken-rs does not know."""
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


def tiktoken_count(text: str, model: str = OPENAI_HINT_MODEL) -> int:
    """Tokens of ``text`` in ``model``'s tiktoken BPE (cl100k_base for a model tiktoken-rs does not know).

    A special token in the text counts as one, as the reference's ``encode_with_special_tokens`` does.
    A lone surrogate (a Python ``str`` can hold one, a Rust string cannot) counts as U+FFFD, the
    replacement character.
    """
    import rhai  # the one lazy import of proto: see the module docstring

    try:
        return rhai.tiktoken_count(text, model)
    except UnicodeEncodeError:
        return rhai.tiktoken_count(_SURROGATE.sub("\ufffd", text), model)


def estimate(text: str, family: str, model: str = OPENAI_HINT_MODEL) -> int:
    """The count of ``family``'s rule (``model`` picks the BPE of the OpenAI rule); an unknown family
    counts as ``other``."""
    if family == Family.OPENAI:
        return tiktoken_count(text, model)
    if family == Family.ANTHROPIC:
        return third_and_a_half_bytes(text)
    return quarter_bytes(text)
