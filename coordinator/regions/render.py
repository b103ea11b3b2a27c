"""Interpreting what ``render`` returned (docs/scripts/regions.md#renderctx) and the fallback block
(docs/scripts/regions.md#renderctx).

The grammar is strict and all-or-nothing: one malformed message discards the
whole output and the region falls back to its entries, exactly as the
reference does.  Everything here is a pure function of plain JSON values.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from coordinator.regions.errors import InvalidShape
from coordinator.regions.model import Entry, Message, SystemBlock, Volatility
from proto.vocabulary import rhai_type_name

__all__ = [
    "InvalidShape",
    "RenderOutput",
    "fallback_blocks",
    "fallback_text",
    "interpret_render",
]


@dataclass(frozen=True, slots=True)
class RenderOutput:
    """System blocks and preamble messages produced by one region render."""

    system: tuple[SystemBlock, ...] = ()
    messages: tuple[Message, ...] = ()


def fallback_text(name: str, entries: Sequence[Entry]) -> str:
    """``"[name]:\\n" + entries joined by a blank line`` (docs/scripts/regions.md#renderctx)."""
    return f"[{name}]:\n" + "\n\n".join(entry.content for entry in entries)


def fallback_blocks(name: str, entries: Sequence[Entry], volatility: Volatility) -> tuple[SystemBlock, ...]:
    """The fallback output: one ``Never`` block naming the region, or nothing when empty."""
    if not entries:
        return ()
    return (SystemBlock(fallback_text(name, entries), "Never", volatility, name),)


def interpret_render(value: Any, *, persistent: bool) -> RenderOutput:
    """Turn a render return value (already JSON) into blocks and messages.

    Script-rendered blocks carry cache hint ``Always`` when the region is
    persistent, else ``UntilChanged``; volatility ``rewritten`` and region
    ``""`` whatever the region declares (the reference's behaviour, R6).
    Raises ``InvalidShape`` on any violation.
    """
    hint = "Always" if persistent else "UntilChanged"
    if isinstance(value, str):
        texts = [value] if value else []
        return RenderOutput(tuple(SystemBlock(t, hint, "rewritten", "") for t in texts))
    if not isinstance(value, Mapping):
        raise InvalidShape(f"render must return a string or a map, not {_type_name(value)}")
    texts = _system_texts(value.get("system"))
    messages = _messages(value.get("messages"))
    return RenderOutput(tuple(SystemBlock(t, hint, "rewritten", "") for t in texts), messages)


_ARTICLED: Final = {
    "()": "()",
    "bool": "a bool",
    "i64": "an integer",
    "f64": "a float",
    "string": "a string",
    "array": "an array",
    "map": "a map",
}
"""How the reference's render errors name a Rhai type (``proto.vocabulary.rhai_type_name``)."""


def _type_name(value: Any) -> str:
    return _ARTICLED.get(rhai_type_name(value), type(value).__name__)


def _system_texts(system: Any) -> list[str]:
    if system is None:
        return []
    if isinstance(system, str):
        return [system] if system else []
    if isinstance(system, list):
        texts: list[str] = []
        for index, item in enumerate(system):
            if not isinstance(item, str):
                raise InvalidShape(f"system[{index}] must be a string, not {_type_name(item)}")
            if item:
                texts.append(item)
        return texts
    raise InvalidShape(f"system must be a string or an array of strings, not {_type_name(system)}")


def _messages(messages: Any) -> tuple[Message, ...]:
    if messages is None:
        return ()
    if not isinstance(messages, list):
        raise InvalidShape(f"messages must be an array, not {_type_name(messages)}")
    return tuple(_message(index, item) for index, item in enumerate(messages))


def _message(index: int, item: Any) -> Message:
    where = f"messages[{index}]"
    if not isinstance(item, Mapping):
        raise InvalidShape(f"{where} must be a map, not {_type_name(item)}")
    role = item.get("role")
    if role not in ("user", "assistant") or not isinstance(role, str):
        raise InvalidShape(f'{where}.role must be "user" or "assistant", not {role!r}')
    content = item.get("content")
    if content is not None and not isinstance(content, str):
        raise InvalidShape(f"{where}.content must be a string, not {_type_name(content)}")
    if "tool_calls" in item:
        return _assistant_calls(where, role, content, item["tool_calls"])
    if "tool_results" in item:
        return _user_results(where, role, item["tool_results"])
    if content is None:
        raise InvalidShape(f"{where} has no content")
    return Message("user" if role == "user" else "assistant", content)


def _assistant_calls(where: str, role: str, content: str | None, calls: Any) -> Message:
    if role != "assistant":
        raise InvalidShape(f'{where}: tool_calls need role "assistant"')
    if not isinstance(calls, list):
        raise InvalidShape(f"{where}.tool_calls must be an array, not {_type_name(calls)}")
    blocks: list[dict[str, Any]] = []
    if content:
        blocks.append({"type": "text", "text": content})
    for index, call in enumerate(calls):
        at = f"{where}.tool_calls[{index}]"
        if not isinstance(call, Mapping):
            raise InvalidShape(f"{at} must be a map, not {_type_name(call)}")
        if not isinstance(call.get("id"), str):
            raise InvalidShape(f"{at}.id must be a string")
        if not isinstance(call.get("name"), str):
            raise InvalidShape(f"{at}.name must be a string")
        block: dict[str, Any] = {
            "type": "tool_use",
            "id": call["id"],
            "name": call["name"],
            "input": call.get("arguments", {}),  # present-but-null stays null
        }
        if isinstance(call.get("thought_signature"), str):
            block["thought_signature"] = call["thought_signature"]
        blocks.append(block)
    return Message("assistant", tuple(blocks))


def _user_results(where: str, role: str, results: Any) -> Message:
    if role != "user":
        raise InvalidShape(f'{where}: tool_results need role "user"')
    if not isinstance(results, list):
        raise InvalidShape(f"{where}.tool_results must be an array, not {_type_name(results)}")
    blocks: list[dict[str, Any]] = []
    for index, result in enumerate(results):
        at = f"{where}.tool_results[{index}]"
        if not isinstance(result, Mapping):
            raise InvalidShape(f"{at} must be a map, not {_type_name(result)}")
        if not isinstance(result.get("tool_call_id"), str):
            raise InvalidShape(f"{at}.tool_call_id must be a string")
        if not isinstance(result.get("content"), str):
            raise InvalidShape(f"{at}.content must be a string")
        is_error = result.get("is_error")
        blocks.append(
            {
                "type": "tool_result",
                "tool_use_id": result["tool_call_id"],
                "content": result["content"],
                "is_error": is_error if isinstance(is_error, bool) else False,
            }
        )
    return Message("user", tuple(blocks))
