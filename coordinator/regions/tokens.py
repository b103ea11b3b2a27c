"""Token estimates of the reference runtime (docs/scripts/regions.md#budgets-and-token-estimates,
docs/scripts/regions.md#renderctx budget check).

The reference never tokenizes for regions: it uses ``ceil(utf8_bytes / 4)``.
Using the same estimate is what makes budgets, ``on_write`` re-estimates and
overflow arithmetic come out identical.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import rhai

from contract.tokens import quarter_bytes
from coordinator.regions.model import Message, SystemBlock

__all__ = ["compact_json", "estimate_tokens", "render_cost"]


estimate_tokens = quarter_bytes
"""``ceil(len(text.encode()) / 4)``: ``""`` is 0, ``"abc"`` 1, ``"abcde"`` 2 (``contract.tokens``, the same
arithmetic as the worker's ``count_tokens`` helper)."""


def compact_json(value: Any) -> str:
    """serde_json's compact form with sorted keys and raw non-ASCII
    (docs/scripts/host-functions.md#values-between-json-and-rhai), byte for byte: written by the binding
    (``rhai.to_json``: ``1e-7`` where ``json.dumps`` writes ``1e-07``, any depth).  Only integers beyond i64,
    which Rhai cannot hold, take ``json.dumps``."""
    try:
        return rhai.to_json(value)
    except OverflowError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"), sort_keys=True)


def _block_cost(block: dict[str, Any]) -> int:
    kind = block.get("type")
    if kind == "text":
        return estimate_tokens(str(block.get("text", "")))
    if kind == "tool_use":
        return estimate_tokens(compact_json(block.get("input")))
    if kind == "tool_result":
        return estimate_tokens(str(block.get("content", "")))
    return 0


def render_cost(system: Iterable[SystemBlock], messages: Iterable[Message]) -> int:
    """The post-render budget figure (docs/scripts/regions.md#budgets-and-token-estimates).

    Sum of per-item estimates over block texts, plain message texts, tool-use
    inputs serialized as JSON and tool-result contents.
    """
    total = sum(estimate_tokens(block.text) for block in system)
    for message in messages:
        if isinstance(message.content, str):
            total += estimate_tokens(message.content)
        else:
            total += sum(_block_cost(block) for block in message.content)
    return total
