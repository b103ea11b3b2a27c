"""The ``request`` map a provider's ``inference``/``stream`` receives
(docs/scripts/providers.md#inferencestate-request).

Callers (the CLI's REQUEST.json, the Python API) may give a partial request; :func:`build_request`
fills the defaults the reference would have filled and checks the shapes, so a script always sees
the documented keys with the documented types. ``temperature`` is passed exactly as given (no f32
widening: docs/scripts/providers.md#inferencestate-request).
"""

from __future__ import annotations

import math
from typing import Any

from coordinator.providers.errors import InvalidProviderRequest
from coordinator.providers.models import Capabilities
from coordinator.providers.response import to_json_text

__all__ = [
    "DEFAULT_TEMPERATURE",
    "InvalidProviderRequest",
    "build_request",
    "prompt_text",
]

DEFAULT_TEMPERATURE = 0.7
_HINTS = frozenset({"Always", "UntilChanged", "RecentlyChanged", "Never"})
_VOLATILITY = frozenset({"stable", "grows", "rewritten"})


def _system(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidProviderRequest("request.system must be an array of blocks")
    blocks = []
    for i, block in enumerate(raw):
        if isinstance(block, str):
            block = {"text": block}
        if not isinstance(block, dict) or not isinstance(block.get("text"), str):
            raise InvalidProviderRequest(f"request.system[{i}] must be a block with a string text")
        hint = block.get("cache_hint", "UntilChanged")
        sliding = isinstance(hint, dict) and "SlidingPrefix" in hint
        if not (sliding or (isinstance(hint, str) and hint in _HINTS)):
            raise InvalidProviderRequest(f"request.system[{i}].cache_hint {hint!r} is not a cache hint")
        volatility = block.get("volatility", "rewritten")
        if not isinstance(volatility, str) or volatility not in _VOLATILITY:
            raise InvalidProviderRequest(f"request.system[{i}].volatility must be stable, grows or rewritten")
        region = block.get("region", "")
        blocks.append(
            {"text": block["text"], "cache_hint": hint, "region": str(region), "volatility": volatility}
        )
    return blocks


def _messages(raw: Any) -> list[dict[str, Any]]:
    if not isinstance(raw, list):
        raise InvalidProviderRequest("request.messages must be an array")
    out = []
    for i, message in enumerate(raw):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise InvalidProviderRequest(f"request.messages[{i}] must have role user or assistant")
        content = message.get("content")
        if not isinstance(content, (str, list)):
            raise InvalidProviderRequest(f"request.messages[{i}].content must be a string or a block list")
        item: dict[str, Any] = {"role": message["role"], "content": content}
        if message.get("cache_breakpoint") is True:
            item["cache_breakpoint"] = True
        out.append(item)
    return out


def _tools(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise InvalidProviderRequest("request.tools must be an array")
    tools = []
    for i, tool in enumerate(raw):
        if not isinstance(tool, dict) or not isinstance(tool.get("name"), str):
            raise InvalidProviderRequest(f"request.tools[{i}] must have a string name")
        tools.append(
            {
                "name": tool["name"],
                "description": str(tool.get("description", "")),
                "parameters": tool.get("parameters", {"type": "object", "properties": {}}),
            }
        )
    return tools


def prompt_text(request: dict[str, Any]) -> str:
    """Text the token guard counts: system texts, message texts (text blocks only), tool definitions.

    The schema is written as serde_json writes it (compact, raw UTF-8), since a script's ``count_tokens``
    sees this exact text (docs/scripts/providers.md#count_tokensstate-text-model).
    """
    pieces = [block["text"] for block in request.get("system", [])]
    for message in request.get("messages", []):
        content = message.get("content")
        if isinstance(content, str):
            pieces.append(content)
        elif isinstance(content, list):
            pieces.extend(
                b["text"]
                for b in content
                if isinstance(b, dict) and b.get("type") == "text" and isinstance(b.get("text"), str)
            )
    for tool in request.get("tools", []):
        pieces += [tool["name"], tool["description"], to_json_text(tool["parameters"])]
    return "\n".join(pieces)


def _int_field(value: Any, name: str) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise InvalidProviderRequest(f"request.{name} must be a non-negative integer")
    return value


def build_request(raw: Any, caps: Capabilities, default_model: str | None = None) -> dict[str, Any]:
    """A complete request map from a partial one (defaults of
    docs/scripts/providers.md#inferencestate-request)."""
    if not isinstance(raw, dict):
        raise InvalidProviderRequest("the request must be a JSON object")
    model = raw.get("model", default_model)
    if not isinstance(model, str) or not model:
        raise InvalidProviderRequest("request.model is required (or the script's @default_model)")
    request: dict[str, Any] = {
        "system": _system(raw.get("system")),
        "messages": _messages(raw.get("messages", [])),
        "tools": _tools(raw.get("tools")),
        "model": model,
    }
    temperature = raw.get("temperature", DEFAULT_TEMPERATURE)
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise InvalidProviderRequest("request.temperature must be a number")
    # A model whose capabilities say no temperature always gets 0.0, whatever the stage asked
    # (docs/scripts/providers.md#inferencestate-request).
    request["temperature"] = float(temperature) if caps.supports_temperature else 0.0
    max_tokens = _int_field(raw.get("max_tokens"), "max_tokens")
    if max_tokens is None:
        room = caps.max_context_tokens - math.ceil(len(prompt_text(request).encode()) / 4)
        max_tokens = max(1, min(room, caps.max_output_tokens))
    request["max_tokens"] = max_tokens
    extra = raw.get("extra")
    if extra is not None and not isinstance(extra, dict):
        raise InvalidProviderRequest("request.extra must be an object or null")
    request["extra"] = extra or None
    request["request_timeout_secs"] = _int_field(raw.get("request_timeout_secs"), "request_timeout_secs")
    return request
