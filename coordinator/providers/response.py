"""Reading what a provider script returns: responses, stream chunks, usage, finish reasons
(docs/scripts/providers.md#inferencestate-request, docs/scripts/providers.md#streamstate-request-on_chunk).

Everything here is lenient on purpose, like the reference: a field of the wrong type reads as its
default instead of failing the call, because a script that forwards an API's reply verbatim should
keep working when the API adds or changes a field.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

import rhai

from coordinator.providers.errors import InvalidResponse, Unconvertible
from coordinator.providers.metadata import MimeRow
from coordinator.providers.parts import Part, parse_parts
from proto.values import copy_nested

__all__ = [
    "Response",
    "ResponseToolCall",
    "StreamChunk",
    "TokenUsage",
    "ToolCallDelta",
    "Unconvertible",
    "collapse",
    "finish_reason",
    "parse_chunk",
    "parse_response",
    "parse_usage",
    "to_json_text",
    "to_plain",
    "uint",
]

_FINISH = {
    "ToolCall": "ToolCall",
    "tool_calls": "ToolCall",
    "tool_use": "ToolCall",
    "TokenLimit": "TokenLimit",
    "length": "TokenLimit",
    "max_tokens": "TokenLimit",
    "Stop": "Stop",
    "stop_sequence": "Stop",
}


def to_plain(value: Any) -> Any:
    """The JSON form of a script value (docs/scripts/host-functions.md#values-between-json-and-rhai); a blob
    becomes a list of byte integers.

    Any depth (no recursion): the reference has no nesting limit."""
    if (  # the usual answer, a flat map of text and numbers: two C-level passes over its types
        type(value) is dict
        and _FLAT_KEYS.issuperset(map(type, value))
        and _FLAT_VALUES.issuperset(map(type, value.values()))
    ):
        return dict(value)
    return copy_nested(value, _plain_leaf, _plain_key)


_FLAT_KEYS = frozenset({str})
_FLAT_VALUES = frozenset({str, int, bool, type(None)})
"""Exact types :func:`_plain_leaf` hands back unchanged (floats are not: a non-finite one is null)."""


def _plain_leaf(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (bytes, bytearray, memoryview)):
        return list(bytes(value))
    raise Unconvertible(f"not plain data: {type(value).__name__}")


def _plain_key(key: Any) -> str:
    if not isinstance(key, str):
        raise Unconvertible("map key is not a string")
    return key


def uint(value: Any) -> int:
    """A non-negative integer field: anything else (float, negative, string, ()) reads as 0."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return 0


def finish_reason(value: Any) -> str:
    """Case-sensitive mapping of docs/scripts/providers.md#inferencestate-request; note ``"stop"`` is
    Complete, not Stop."""
    return _FINISH.get(value, "Complete") if isinstance(value, str) else "Complete"


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Normalised usage: ``prompt_tokens`` is the fresh part, cache counts subtracted
    (docs/scripts/providers.md#inferencestate-request)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    total_tokens: int = 0
    cached_tokens: int = 0
    cache_write_tokens: int = 0
    cost_usd: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The ``tokens_used`` object of ``rhaipool infer --json``."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
            "cached_tokens": self.cached_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "cost_usd": self.cost_usd,
        }


def _cost(raw: dict[str, Any]) -> float | None:
    """``cost_usd`` if the key exists (even as ()), else ``cost``; non-numbers are unknown."""
    value = raw["cost_usd"] if "cost_usd" in raw else raw.get("cost")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def parse_usage(raw: Any) -> TokenUsage:
    """Normalise a ``tokens_used`` / chunk ``tokens`` value; a non-map is all zeros."""
    if not isinstance(raw, dict):
        return TokenUsage()
    cached = uint(raw.get("cached_tokens"))
    write = uint(raw.get("cache_write_tokens"))
    fresh = max(0, uint(raw.get("prompt_tokens")) - cached - write)
    completion = uint(raw.get("completion_tokens"))
    total = max(fresh + cached + write + completion, uint(raw.get("total_tokens")))
    return TokenUsage(fresh, completion, total, cached, write, _cost(raw))


@dataclass(frozen=True, slots=True)
class ResponseToolCall:
    """One tool call of a response; ``arguments`` stays exactly what the script returned."""

    id: str
    name: str
    arguments: Any
    thought_signature: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form; ``thought_signature`` only when present."""
        out: dict[str, Any] = {"id": self.id, "name": self.name, "arguments": self.arguments}
        if self.thought_signature is not None:
            out["thought_signature"] = self.thought_signature
        return out


def _str_or_empty(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _tool_call(item: Any) -> ResponseToolCall:
    if not isinstance(item, dict):
        return ResponseToolCall("", "", None)
    sig = item.get("thought_signature")
    return ResponseToolCall(
        _str_or_empty(item.get("id")),
        _str_or_empty(item.get("name")),
        item.get("arguments"),
        sig if isinstance(sig, str) else None,
    )


@dataclass(frozen=True, slots=True)
class Response:
    """A normalised ``inference`` answer."""

    content: str = ""
    tool_calls: list[ResponseToolCall] = field(default_factory=list)
    tokens_used: TokenUsage = field(default_factory=TokenUsage)
    finish_reason: str = "Complete"
    parts: list[Part] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The success object of ``rhaipool infer --json`` (docs/reference/json.md)."""
        return {
            "content": self.content,
            "tool_calls": [t.to_dict() for t in self.tool_calls],
            "tokens_used": self.tokens_used.to_dict(),
            "finish_reason": self.finish_reason,
            "parts": [p.to_dict() for p in self.parts],
        }


def parse_response(value: Any, mime_rows: list[MimeRow] | None = None) -> Response:
    """Read an ``inference`` return value; raise InvalidResponse for unconvertible or non-map values."""
    try:
        plain = to_plain(value)
    except Unconvertible as exc:
        raise InvalidResponse(f"provider returned an unconvertible value: {exc}") from exc
    if not isinstance(plain, dict):
        raise InvalidResponse(f"provider script `inference` must return a map, got: {to_json_text(plain)}")
    calls = plain.get("tool_calls")
    return Response(
        content=_str_or_empty(plain.get("content")),
        tool_calls=[_tool_call(c) for c in calls] if isinstance(calls, list) else [],
        tokens_used=parse_usage(plain.get("tokens_used")),
        finish_reason=finish_reason(plain.get("finish_reason")),
        parts=parse_parts(plain.get("parts"), mime_rows),
    )


@dataclass(frozen=True, slots=True)
class ToolCallDelta:
    """A piece of a tool call in a stream chunk."""

    index: int = 0
    id: str | None = None
    name: str | None = None
    arguments_delta: str = ""
    thought_signature: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form; optional keys only when present."""
        out: dict[str, Any] = {"index": self.index, "arguments_delta": self.arguments_delta}
        for key in ("id", "name", "thought_signature"):
            if getattr(self, key) is not None:
                out[key] = getattr(self, key)
        return out


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """One streamed piece: text delta, tool-call deltas, usage and finish reason when known."""

    delta: str = ""
    tool_calls: list[ToolCallDelta] = field(default_factory=list)
    tokens: TokenUsage | None = None
    finish_reason: str | None = None
    parts: list[Part] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """One line of ``rhaipool infer --stream --json``."""
        out: dict[str, Any] = {"delta": self.delta, "tool_calls": [t.to_dict() for t in self.tool_calls]}
        out["tokens"] = self.tokens.to_dict() if self.tokens is not None else None
        out["finish_reason"] = self.finish_reason
        if self.parts:
            out["parts"] = [p.to_dict() for p in self.parts]
        return out


def _delta(item: Any) -> ToolCallDelta:
    if not isinstance(item, dict):
        return ToolCallDelta()
    index = item.get("index")

    def opt(key: str) -> str | None:
        v = item.get(key)
        return v if isinstance(v, str) else None

    return ToolCallDelta(
        # a u64 field: negative or float reads as the default 0
        # (docs/scripts/host-functions.md#values-between-json-and-rhai)
        index=uint(index),
        id=opt("id"),
        name=opt("name"),
        arguments_delta=_str_or_empty(item.get("arguments_delta")),
        thought_signature=opt("thought_signature"),
    )


def parse_chunk(value: Any, mime_rows: list[MimeRow] | None = None) -> StreamChunk:
    """Read a value passed to ``on_chunk.call``; only a value with no JSON form is an error
    (docs/scripts/providers.md#streamstate-request-on_chunk)."""
    try:
        plain = to_plain(value)
    except Unconvertible as exc:
        raise InvalidResponse(f"stream chunk is not convertible: {exc}") from exc
    if not isinstance(plain, dict):
        plain = {}  # convertible but not a map: every field reads as its default, like the reference
    calls = plain.get("tool_calls")
    reason = plain.get("finish_reason")
    return StreamChunk(
        delta=_str_or_empty(plain.get("delta")),
        tool_calls=[_delta(c) for c in calls] if isinstance(calls, list) else [],
        tokens=parse_usage(plain["tokens"]) if "tokens" in plain else None,
        finish_reason=finish_reason(reason) if isinstance(reason, str) else None,
        parts=parse_parts(plain.get("parts"), mime_rows),
    )


def _float_text(value: float) -> str:
    """A finite float as serde_json (ryu) writes it: shortest digits, ``1e-7``, ``1e21``, ``0.00001``."""
    if value == 0:
        return "-0.0" if math.copysign(1.0, value) < 0 else "0.0"
    sign = "-" if value < 0 else ""
    mantissa, _, exp = repr(abs(value)).partition("e")
    whole, _, frac = mantissa.partition(".")
    digits = whole + frac
    point = len(whole) + (int(exp) if exp else 0)
    stripped = digits.lstrip("0")
    point -= len(digits) - len(stripped)
    digits = stripped.rstrip("0") or "0"
    length, kk = len(digits), point
    k = kk - length
    if k >= 0 and kk <= 16:
        text = digits + "0" * k + ".0"
    elif 0 < kk <= 16:
        text = digits[:kk] + "." + digits[kk:]
    elif -5 < kk <= 0:
        text = "0." + "0" * -kk + digits
    elif length == 1:
        text = f"{digits}e{kk - 1}"
    else:
        text = f"{digits[0]}.{digits[1:]}e{kk - 1}"
    return sign + text


def to_json_text(value: Any) -> str:
    """Compact JSON of a plain value exactly as serde_json writes it
    (docs/scripts/host-functions.md#values-between-json-and-rhai): sorted keys, raw UTF-8, floats in ryu's
    spelling; Python's ``json.dumps`` differs on exponents (``1e-07``, ``1e+21``).

    Written by the binding (``rhai.to_json``, the one serde_json-identical writer, any depth); only
    integers beyond i64 (host JSON in u64 range, which Rhai cannot hold) take the Python path."""
    try:
        return rhai.to_json(value)
    except OverflowError:
        return _python_json_text(value)


def _python_json_text(value: Any) -> str:
    if isinstance(value, float):
        return _float_text(value) if math.isfinite(value) else "null"
    if value is None or isinstance(value, (bool, int, str)):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_python_json_text(v) for v in value) + "]"
    if isinstance(value, dict):
        items = sorted(value.items())
        return (
            "{"
            + ",".join(f"{json.dumps(k, ensure_ascii=False)}:{_python_json_text(v)}" for k, v in items)
            + "}"
        )
    return json.dumps(value, ensure_ascii=False)


def collapse(response: Response) -> StreamChunk:
    """The single chunk a provider without ``stream`` emits
    (docs/scripts/providers.md#streamstate-request-on_chunk)."""
    deltas = [
        ToolCallDelta(
            index=i,
            id=call.id,
            name=call.name,
            arguments_delta=to_json_text(call.arguments),
            thought_signature=call.thought_signature,
        )
        for i, call in enumerate(response.tool_calls)
    ]
    return StreamChunk(response.content, deltas, response.tokens_used, response.finish_reason, response.parts)
