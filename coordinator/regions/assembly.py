"""Window assembly after every region rendered (docs/scripts/regions.md#renderctx).

Custom-region messages form a preamble in front of the conversation; system
blocks are sorted for caching; unpaired tool blocks are stripped so a buggy
script can never produce a request a provider refuses; empty messages go; a
request always has a user turn and never ends on the assistant.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Final

from coordinator.regions.model import Message, SystemBlock, is_blank
from coordinator.regions.tokens import compact_json

__all__ = [
    "AssembledRequest",
    "RegionOutput",
    "assemble",
    "drop_empty",
    "ensure_turns",
    "sort_system",
    "strip_orphans",
    "system_hash",
]

_VOLATILITY_RANK: Final = {"stable": 0, "grows": 1, "rewritten": 2}
_HINT_RANK: Final = {"Always": 0, "SlidingPrefix": 1, "UntilChanged": 2, "RecentlyChanged": 2, "Never": 3}


@dataclass(frozen=True, slots=True)
class RegionOutput:
    """What one region contributed, in declaration order.

    ``preamble`` is true for custom regions: their messages are moved in front
    of the conversation wherever the region is declared.
    """

    system: tuple[SystemBlock, ...] = ()
    messages: tuple[Message, ...] = ()
    preamble: bool = False


@dataclass(frozen=True, slots=True)
class AssembledRequest:
    """The system blocks and messages a provider would receive."""

    system: tuple[SystemBlock, ...]
    messages: tuple[Message, ...]
    system_hash: str

    def to_json(self) -> dict[str, Any]:
        """``{"system": [...], "messages": [...]}`` in wire shapes."""
        return {
            "system": [block.to_json() for block in self.system],
            "messages": [message.to_json() for message in self.messages],
        }


def _hint_rank(hint: Any) -> int:
    if isinstance(hint, dict):
        return _HINT_RANK["SlidingPrefix"]
    return _HINT_RANK.get(str(hint), _HINT_RANK["Never"])


def sort_system(blocks: Sequence[SystemBlock]) -> tuple[SystemBlock, ...]:
    """Stable sort by volatility (stable < grows < rewritten), then cache hint."""
    return tuple(
        sorted(blocks, key=lambda b: (_VOLATILITY_RANK.get(b.volatility, 2), _hint_rank(b.cache_hint)))
    )


def system_hash(blocks: Sequence[SystemBlock]) -> str:
    """Identity of the system prefix, to decide on a message cache breakpoint."""
    return hashlib.sha256(compact_json([b.to_json() for b in blocks]).encode()).hexdigest()


def strip_orphans(messages: Sequence[Message]) -> tuple[Message, ...]:
    """Remove tool uses without a result and results without a use, anywhere.

    A block-list message that becomes empty is dropped; plain text is untouched.
    """
    uses: set[str] = set()
    results: set[str] = set()
    for message in messages:
        if isinstance(message.content, str):
            continue
        for block in message.content:
            if block.get("type") == "tool_use":
                uses.add(str(block.get("id")))
            elif block.get("type") == "tool_result":
                results.add(str(block.get("tool_use_id")))
    out: list[Message] = []
    for message in messages:
        if isinstance(message.content, str):
            out.append(message)
            continue
        kept = tuple(b for b in message.content if _paired(b, uses, results))
        if kept or not message.content:
            out.append(replace(message, content=kept))
    return tuple(out)


def _paired(block: dict[str, Any], uses: set[str], results: set[str]) -> bool:
    if block.get("type") == "tool_use":
        return str(block.get("id")) in results
    if block.get("type") == "tool_result":
        return str(block.get("tool_use_id")) in uses
    return True


def _place_breakpoint(messages: Sequence[Message], prefix_stable: bool) -> tuple[Message, ...]:
    out = list(messages)
    if not prefix_stable or len(out) < 2:
        return tuple(out)
    at = len(out) - 4 if len(out) >= 5 else 0
    out[at] = replace(out[at], cache_breakpoint=True)
    return tuple(out)


def drop_empty(messages: Sequence[Message]) -> tuple[Message, ...]:
    """Drop messages whose text is blank or whose block list is empty."""
    return tuple(
        m for m in messages if (not is_blank(m.content) if isinstance(m.content, str) else m.content)
    )


def ensure_turns(messages: Sequence[Message]) -> tuple[Message, ...]:
    """Append ``"Begin."`` when no user turn exists, then ``"Continue."`` after an assistant turn."""
    out = list(messages)
    if not any(m.role == "user" for m in out):
        out.append(Message("user", "Begin."))
    if out and out[-1].role == "assistant":
        out.append(Message("user", "Continue."))
    return tuple(out)


def assemble(
    outputs: Sequence[RegionOutput],
    *,
    hint_blocks: Sequence[SystemBlock] = (),
    previous_system_hash: str | None = None,
) -> AssembledRequest:
    """Assemble the window (docs/scripts/regions.md#renderctx) from region outputs given in declaration order.

    ``hint_blocks`` (the runtime's own instruction blocks) go first, unsorted.
    A message cache breakpoint is placed only when the system prefix equals
    ``previous_system_hash`` or when there was no previous request.
    """
    blocks: list[SystemBlock] = []
    preamble: list[Message] = []
    conversation: list[Message] = []
    for output in outputs:
        blocks.extend(output.system)
        (preamble if output.preamble else conversation).extend(output.messages)
    system = tuple(hint_blocks) + sort_system(blocks)
    digest = system_hash(system)
    messages = strip_orphans(preamble + conversation)
    stable = previous_system_hash is None or previous_system_hash == digest
    messages = ensure_turns(drop_empty(_place_breakpoint(messages, stable)))
    return AssembledRequest(system, messages, digest)
