"""Plain values of the region contract: entries, blocks, messages (docs/scripts/regions.md#renderctx).

These are the host's view of a custom region.  They carry no behaviour beyond
converting themselves to the exact JSON shapes a hook's ``ctx`` and a provider's
request use, so that every other module can be tested on plain data.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from contract.text import RUST_WHITESPACE
from proto.values import copy_nested

__all__ = [
    "CACHE_HINTS",
    "ENTRY_KINDS",
    "RUST_WHITESPACE",
    "VOLATILITIES",
    "CacheHint",
    "Entry",
    "EntryKind",
    "Message",
    "SystemBlock",
    "ToolCall",
    "Volatility",
    "is_blank",
    "plain_json",
    "rust_trim",
    "to_rhai_json",
]

EntryKind = Literal["text", "user_message", "assistant_turn", "tool_result"]
Volatility = Literal["stable", "grows", "rewritten"]
CacheHint = str | dict[str, Any]
"""``"Always"``, ``"UntilChanged"``, ``"RecentlyChanged"``, ``"Never"`` or
``{"SlidingPrefix": {"stable_fraction": f}}`` -- the serialized forms of
docs/scripts/providers.md#inferencestate-request."""

ENTRY_KINDS: Final = ("text", "user_message", "assistant_turn", "tool_result")
VOLATILITIES: Final = ("stable", "grows", "rewritten")
CACHE_HINTS: Final = ("Always", "UntilChanged", "RecentlyChanged", "Never")

_I64_MIN: Final = -(2**63)
_I64_MAX: Final = 2**63 - 1


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call of an ``assistant_turn`` entry (docs/scripts/regions.md#renderctx)."""

    id: str
    name: str
    arguments: Any = field(default_factory=dict)
    thought_signature: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The ctx shape: ``thought_signature`` is omitted when absent."""
        out: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.thought_signature is not None:
            out["thought_signature"] = self.thought_signature
        return out

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> ToolCall:
        """Build from the docs/scripts/regions.md#renderctx shape (as written in a scenario file)."""
        signature = raw.get("thought_signature")
        return cls(
            id=str(raw["id"]),
            name=str(raw["name"]),
            arguments=raw.get("arguments", {}),
            thought_signature=signature if isinstance(signature, str) else None,
        )


@dataclass(frozen=True, slots=True)
class Entry:
    """One stored entry of a region; ``tokens`` is what the writer supplied
    (docs/scripts/regions.md#budgets-and-token-estimates)."""

    content: str
    tokens: int
    kind: EntryKind = "text"
    key: str | None = None
    timestamp: int = 0
    tool_calls: tuple[ToolCall, ...] = ()
    tool_call_id: str = ""
    tool_name: str = ""
    is_error: bool = False
    tainted: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ENTRY_KINDS:
            raise ValueError(f"unknown entry kind {self.kind!r} (expected one of {', '.join(ENTRY_KINDS)})")
        if isinstance(self.tokens, bool) or not isinstance(self.tokens, int) or self.tokens < 0:
            raise ValueError(f"entry tokens must be a non-negative integer, got {self.tokens!r}")

    def to_ctx(self, *, with_timestamp: bool = True) -> dict[str, Any]:
        """The docs/scripts/regions.md#renderctx entry object handed to ``render`` and ``on_overflow``."""
        out: dict[str, Any] = {
            "content": self.content,
            "tokens": self.tokens,
            "key": self.key,
            "kind": self.kind,
        }
        if with_timestamp:
            out["timestamp"] = self.timestamp
        if self.kind == "assistant_turn":
            out["tool_calls"] = [call.to_json() for call in self.tool_calls]
        elif self.kind == "tool_result":
            out["tool_call_id"] = self.tool_call_id
            out["tool_name"] = self.tool_name
            out["is_error"] = self.is_error
        return out


@dataclass(frozen=True, slots=True)
class SystemBlock:
    """One system block as a provider receives it (docs/scripts/providers.md#inferencestate-request)."""

    text: str
    cache_hint: CacheHint
    volatility: Volatility
    region: str

    def to_json(self) -> dict[str, Any]:
        """The request shape: ``{text, cache_hint, volatility, region}``."""
        return {
            "text": self.text,
            "cache_hint": self.cache_hint,
            "volatility": self.volatility,
            "region": self.region,
        }


@dataclass(frozen=True, slots=True)
class Message:
    """A conversation message: plain text, or a list of wire-shaped blocks
    (docs/scripts/regions.md#renderctx)."""

    role: Literal["user", "assistant"]
    content: str | tuple[dict[str, Any], ...]
    cache_breakpoint: bool = False

    @property
    def is_blocks(self) -> bool:
        """True when the content is a block list rather than plain text."""
        return not isinstance(self.content, str)

    def to_json(self) -> dict[str, Any]:
        """The request shape; ``cache_breakpoint`` appears only when true."""
        content: Any = self.content if isinstance(self.content, str) else [dict(b) for b in self.content]
        out: dict[str, Any] = {"role": self.role, "content": content}
        if self.cache_breakpoint:
            out["cache_breakpoint"] = True
        return out


def to_rhai_json(value: Any) -> Any:
    """Prepare host JSON for Rhai (docs/scripts/host-functions.md#values-between-json-and-rhai): integers
    outside i64 become floats.

    A host may hand us arbitrary JSON in tool-call arguments; Rhai has no big
    integers, and the reference turns u64-range values into (lossy) floats.
    Any depth (no recursion): the reference has no nesting limit.
    """
    return copy_nested(value, _rhai_json_leaf, str, maps=Mapping)


def _rhai_json_leaf(value: Any) -> Any:
    if isinstance(value, bool) or value is None or isinstance(value, str | float):
        return value
    if isinstance(value, int):
        return value if _I64_MIN <= value <= _I64_MAX else float(value)
    raise TypeError(f"value of type {type(value).__name__} has no JSON form")


def plain_json(value: Any) -> Any:
    """Convert a hook's return value to JSON the way the reference does
    (docs/scripts/host-functions.md#values-between-json-and-rhai).

    Returns the JSON value; raises ``TypeError`` for a value with no JSON form
    (a blob, a function pointer, a timestamp, a custom type).  Non-finite floats
    become ``None`` as serde_json writes them.  Any depth (no recursion): the
    reference has no nesting limit.
    """
    return copy_nested(value, _plain_leaf, _plain_key, sort_keys=True)


def _plain_leaf(value: Any) -> Any:
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    raise TypeError(f"a value of type {type(value).__name__} is not plain data")


def _plain_key(key: Any) -> str:
    if not isinstance(key, str):
        raise TypeError("map with a non-string key has no JSON form")
    return key


def rust_trim(text: str) -> str:
    """``str::trim`` of the reference: strips Unicode ``White_Space`` only."""
    return text.strip(RUST_WHITESPACE)


def is_blank(text: str) -> bool:
    """True for an empty or whitespace-only text (the reference's ``trim().is_empty()``)."""
    return not rust_trim(text)
