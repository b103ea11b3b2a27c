"""Anthropic Messages over a tenant's provider scripts: ``POST /v1/messages`` and
``POST /v1/messages/count_tokens``.

The body is translated into the provider contract's request
(docs/scripts/providers.md#inferencestate-request), which is already close to this API's shape (system blocks,
``text``/``tool_use``/``tool_result`` blocks), and run by the runtime the native routes use; the answer and
the stream events are written as the Anthropic API sends them. ``model`` is ``PROVIDER/MODEL``; the table of
what maps where is in docs/use-from-any-runtime.md.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from coordinator.providers import InvalidProviderRequest, ProviderError
from coordinator.providers.request import prompt_text
from coordinator.providers.response import Response as ContractResponse
from coordinator.providers.response import StreamChunk, TokenUsage
from coordinator.service.errors import RouteError
from coordinator.service.front.common import (
    CUTS,
    Refusal,
    failure,
    invalid,
    lookup,
    open_stream,
    split_model,
)
from coordinator.service.front.schemas import MessagesBody, check_extra
from coordinator.service.http import ENCODE, Cut, HeldStream, parse_body, reply, require_tenant

__all__ = ["ROUTES_ANTHROPIC", "error_body", "message", "messages_request"]

_KNOWN: Final = frozenset(
    {"model", "messages", "system", "max_tokens", "tools", "tool_choice", "stop_sequences", "temperature",
     "stream"}
)  # fmt: skip
"""Fields the translation reads; every other one goes to ``extra``."""
_STOP: Final = {
    "ToolCall": "tool_use",
    "TokenLimit": "max_tokens",
    "Stop": "stop_sequence",
    "Complete": "end_turn",
}
_TYPES: Final = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "permission": "permission_error",
    "not_found": "not_found_error",
    "too_large": "request_too_large",
    "rate_limit": "rate_limit_error",
    "server": "api_error",
    "upstream": "api_error",
    "overloaded": "overloaded_error",
    "timeout": "timeout_error",
}
_SKIPPED: Final = frozenset({"thinking", "redacted_thinking"})
"""Blocks of the model's own reasoning sent back in history: the contract has no place for them."""


def error_body(error: Refusal) -> dict[str, Any]:
    """``{"type": "error", "error": {"type", "message"}}``."""
    return {"type": "error", "error": {"type": _TYPES[error.kind], "message": error.message}}


# -- request -------------------------------------------------------------------------------------


def _texts(content: Any, where: str) -> str:
    """A string, or text blocks joined (system, tool_result content)."""
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        raise invalid(f"{where} must be a string or an array of text blocks", where)
    pieces = []
    for j, block in enumerate(content):
        if (
            not isinstance(block, dict)
            or block.get("type") != "text"
            or not isinstance(block.get("text"), str)
        ):
            kind = block.get("type") if isinstance(block, dict) else type(block).__name__
            raise invalid(f"{where}[{j}]: block type '{kind}' is not supported here (only text)", where)
        pieces.append(block["text"])
    return "\n".join(pieces)


def _block(block: dict[str, Any], where: str) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind == "text" and isinstance(block.get("text"), str):
        return {"type": "text", "text": block["text"]}
    if kind == "tool_use" and isinstance(block.get("id"), str) and isinstance(block.get("name"), str):
        out = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": block.get("input", {})}
        return out
    if kind == "tool_result" and isinstance(block.get("tool_use_id"), str):
        return {
            "type": "tool_result",
            "tool_use_id": block["tool_use_id"],
            "content": _texts(block.get("content"), f"{where}.content"),
            "is_error": block.get("is_error") is True,
        }
    if isinstance(kind, str) and kind in _SKIPPED:
        return None
    if kind in ("text", "tool_use", "tool_result"):
        raise invalid(f"{where}: a {kind} block lacks its required fields", where)
    raise invalid(
        f"{where}: content block type '{kind}' is not supported (text, tool_use, tool_result)", where
    )


def _messages(raw: list[Any]) -> list[dict[str, Any]]:
    out = []
    for i, message in enumerate(raw):
        content = message["content"]
        item: dict[str, Any] = {"role": message["role"]}
        if isinstance(content, str):
            item["content"] = content
        else:
            where = f"messages[{i}].content"
            blocks = [_block(b, f"{where}[{j}]") for j, b in enumerate(content)]
            item["content"] = [b for b in blocks if b is not None]
            if any("cache_control" in b for b in content):
                item["cache_breakpoint"] = True
        out.append(item)
    return out


def _system(raw: Any) -> list[dict[str, Any]]:
    if raw is None:
        return []
    if isinstance(raw, str):
        return [{"text": raw}] if raw else []
    return [{"text": _texts([block], f"system[{i}]")} for i, block in enumerate(raw)]


def _tools(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    tools = []
    for i, tool in enumerate(raw):
        name, schema, kind = tool.get("name"), tool.get("input_schema"), tool.get("type", "custom")
        if kind != "custom":
            message = f"tools[{i}]: server tools such as '{kind}' are not supported (only client tools)"
            raise invalid(message, f"tools[{i}]")
        if not isinstance(name, str) or not isinstance(schema, dict):
            raise invalid(f"tools[{i}] needs a string name and an input_schema object", f"tools[{i}]")
        description = tool.get("description")
        tools.append(
            {
                "name": name,
                "description": description if isinstance(description, str) else "",
                "parameters": schema,
            }
        )
    return tools


def messages_request(body: MessagesBody) -> tuple[str, dict[str, Any]]:
    """(provider, the contract's request) of a validated Messages body."""
    provider, model = split_model(body["model"])
    request: dict[str, Any] = {
        "model": model,
        "system": _system(body.get("system")),
        "messages": _messages(body["messages"]),
    }
    tools = body.get("tools")
    if tools:
        request["tools"] = _tools(tools)
    for key in ("max_tokens", "temperature"):
        value = body.get(key)
        if value is not None:
            request[key] = value
    extra = {key: value for key, value in body.items() if key not in _KNOWN and value is not None}
    stop = body.get("stop_sequences")
    if stop:
        extra["stop"] = stop
    choice = body.get("tool_choice")
    if choice is not None:
        extra["tool_choice"] = choice
    if extra:
        request["extra"] = check_extra(extra)
    return provider, request


# -- reply ---------------------------------------------------------------------------------------


def _usage(tokens: TokenUsage) -> dict[str, Any]:
    return {
        "input_tokens": tokens.prompt_tokens,
        "output_tokens": tokens.completion_tokens,
        "cache_read_input_tokens": tokens.cached_tokens,
        "cache_creation_input_tokens": tokens.cache_write_tokens,
    }


def _input(arguments: Any) -> Any:
    """A tool call's arguments as an object (a JSON string is parsed; none is ``{}``)."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments) if arguments.strip() else {}
        except ValueError:
            return {"arguments": arguments}
    return {} if arguments is None else arguments


def _message_id() -> str:
    return "msg_" + os.urandom(12).hex()


def message(answer: ContractResponse, model: str) -> dict[str, Any]:
    """A ``message`` object of a contract response."""
    content: list[dict[str, Any]] = []
    if answer.content or not answer.tool_calls:
        content.append({"type": "text", "text": answer.content})
    content += [
        {"type": "tool_use", "id": c.id or f"toolu_{i}", "name": c.name, "input": _input(c.arguments)}
        for i, c in enumerate(answer.tool_calls)
    ]
    return {
        "id": _message_id(),
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": _STOP[answer.finish_reason],
        "stop_sequence": None,
        "usage": _usage(answer.tokens_used),
    }


def _event(kind: str, value: dict[str, Any]) -> bytes:
    return b"event: " + kind.encode() + b"\ndata: " + ENCODE({"type": kind, **value}).encode() + b"\n\n"


class _Blocks:
    """The content blocks of a streamed message: a text block or one per tool call, each opened by
    ``content_block_start`` and closed by ``content_block_stop`` when the next one opens."""

    def __init__(self) -> None:
        self.count = 0
        self.open: int | None = None
        self.text: int | None = None
        self.tools: dict[int, int] = {}

    def _start(self, block: dict[str, Any]) -> list[bytes]:
        out = self.close()
        self.open = self.count
        self.count += 1
        out.append(_event("content_block_start", {"index": self.open, "content_block": block}))
        return out

    def close(self) -> list[bytes]:
        if self.open is None:
            return []
        index, self.open = self.open, None
        if self.text == index:
            self.text = None
        return [_event("content_block_stop", {"index": index})]

    def feed(self, chunk: StreamChunk) -> list[bytes]:
        out: list[bytes] = []
        if chunk.delta:
            if self.text is None:
                out += self._start({"type": "text", "text": ""})
                self.text = self.open
            out.append(
                _event(
                    "content_block_delta",
                    {"index": self.text, "delta": {"type": "text_delta", "text": chunk.delta}},
                )
            )
        for call in chunk.tool_calls:
            index = self.tools.get(call.index)
            if index is None:
                block = {
                    "type": "tool_use",
                    "id": call.id or f"toolu_{call.index}",
                    "name": call.name or "",
                    "input": {},
                }
                out += self._start(block)
                index = self.tools[call.index] = self.count - 1
            if call.arguments_delta:
                delta = {"type": "input_json_delta", "partial_json": call.arguments_delta}
                out.append(_event("content_block_delta", {"index": index, "delta": delta}))
        return out


async def _events(first: StreamChunk, items: AsyncIterator[Any], model: str) -> AsyncIterator[bytes]:
    """The Messages stream: ``message_start``, blocks, ``message_delta`` (stop reason, usage),
    ``message_stop``; an error item ends it with an ``error`` event."""
    start: dict[str, Any] = {
        "id": _message_id(), "type": "message", "role": "assistant", "model": model, "content": [],
        "stop_reason": None, "stop_sequence": None, "usage": {"input_tokens": 0, "output_tokens": 0},
    }  # fmt: skip
    yield _event("message_start", {"message": start})
    blocks = _Blocks()
    finish: str | None = None
    tokens: TokenUsage | None = None
    chunk: Any = first
    while True:
        if not isinstance(chunk, StreamChunk):
            for event in blocks.close():
                yield event
            yield _event("error", {"error": error_body(failure(chunk))["error"]})
            return
        for event in blocks.feed(chunk):
            yield event
        finish = chunk.finish_reason or finish
        tokens = chunk.tokens or tokens
        try:
            chunk = await anext(items)
        except StopAsyncIteration:
            break
    for event in blocks.close():
        yield event
    reason = _STOP[finish] if finish else ("tool_use" if blocks.tools else "end_turn")
    delta = {"delta": {"stop_reason": reason, "stop_sequence": None}, "usage": _usage(tokens or TokenUsage())}
    yield _event("message_delta", delta)
    yield _event("message_stop", {})


# -- routes --------------------------------------------------------------------------------------


def _cut(why: Cut) -> bytes:
    return _event("error", {"error": error_body(CUTS[why])["error"]})


def _refusal(exc: Exception) -> Response:
    error = failure(exc)
    return reply(error_body(error), error.status, error.headers())


async def messages(request: Request) -> Response:
    """``POST /v1/messages``: a message, or its events with ``"stream": true``."""
    tenant = require_tenant(request)
    body: MessagesBody = await parse_body(request, MessagesBody)
    try:
        name, contract = messages_request(body)
        target = await lookup(request, tenant, name)
        if body.get("stream"):
            first, items, stack = await open_stream(request, target, contract)
            return HeldStream(_events(first, items, body["model"]), stack, _cut)
        answer = await target.runtime.inference_for(target.provider, contract, tenant=tenant)
    except (RouteError, ProviderError, InvalidProviderRequest) as exc:
        return _refusal(exc)
    return reply(message(answer, body["model"]))


async def messages_count_tokens(request: Request) -> Response:
    """``POST /v1/messages/count_tokens``: the provider's count of the prompt (``{"input_tokens"}``)."""
    tenant = require_tenant(request)
    body: MessagesBody = await parse_body(request, MessagesBody)
    try:
        name, contract = messages_request(body)
        target = await lookup(request, tenant, name)
        full = target.runtime.request_for(target.provider, contract)
        count = await target.runtime.count_tokens(
            target.provider, prompt_text(full), full["model"], tenant=tenant
        )
    except (RouteError, ProviderError, InvalidProviderRequest) as exc:
        return _refusal(exc)
    return reply({"input_tokens": count})


ROUTES_ANTHROPIC: Final = [
    ("/v1/messages", messages, "POST"),
    ("/v1/messages/count_tokens", messages_count_tokens, "POST"),
]
