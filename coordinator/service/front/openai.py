"""OpenAI Chat Completions over a tenant's provider scripts: ``POST /v1/chat/completions``,
``GET /v1/models``.

The body is translated into the provider contract's request (docs/scripts/providers.md#inferencestate-request)
and run by the runtime the native ``/api/providers/{name}/inference`` route uses; the answer is translated
back. ``model`` is ``PROVIDER/MODEL``. What has no place in the contract's request goes through ``extra`` as
given; what cannot be translated is a 400 naming the field (the table: docs/use-from-any-runtime.md).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import AsyncIterator
from typing import Any, Final

from starlette.requests import Request
from starlette.responses import Response

from coordinator.providers import InvalidProviderRequest, ProviderError
from coordinator.providers.response import Response as ContractResponse
from coordinator.providers.response import StreamChunk, TokenUsage
from coordinator.service.errors import RouteError
from coordinator.service.front.common import (
    CUTS,
    Refusal,
    failure,
    invalid,
    lookup,
    models_cache,
    open_stream,
    refused,
    split_model,
    tool_arguments,
)
from coordinator.service.front.schemas import ChatCompletionBody, check_extra, check_json
from coordinator.service.http import ENCODE, Cut, HeldStream, parse_body, reply, require_tenant, service_of

__all__ = ["ROUTES_OPENAI", "chat_request", "completion", "error_body", "v1_model", "v1_models"]

_KNOWN: Final = frozenset(
    {"model", "messages", "tools", "tool_choice", "max_tokens", "max_completion_tokens", "temperature",
     "stop", "stream", "stream_options", "n"}
)  # fmt: skip
"""Fields the translation reads; every other one goes to ``extra``."""
_FINISH: Final = {"ToolCall": "tool_calls", "TokenLimit": "length", "Stop": "stop", "Complete": "stop"}
_TYPES: Final = {
    "invalid_request": "invalid_request_error",
    "authentication": "invalid_request_error",
    "permission": "permission_error",
    "not_found": "invalid_request_error",
    "too_large": "invalid_request_error",
    "rate_limit": "rate_limit_error",
    "server": "server_error",
    "upstream": "server_error",
    "overloaded": "server_error",
    "timeout": "server_error",
}


def error_body(error: Refusal) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"}}``."""
    code = error.code or ("invalid_api_key" if error.kind == "authentication" else None)
    return {
        "error": {"message": error.message, "type": _TYPES[error.kind], "param": error.param, "code": code}
    }


# -- request -------------------------------------------------------------------------------------


def _text(content: Any, where: str) -> str:
    """A content that must be text: a string, or text parts (joined)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise invalid(f"{where} must be a string or an array of content parts", where)
    pieces = []
    for j, part in enumerate(content):
        if not isinstance(part, dict) or part.get("type") != "text" or not isinstance(part.get("text"), str):
            kind = part.get("type") if isinstance(part, dict) else type(part).__name__
            raise invalid(f"{where}[{j}]: content part type '{kind}' is not supported (only text)", where)
        pieces.append(part["text"])
    return "".join(pieces)


def _user_content(content: Any, where: str) -> str | list[dict[str, Any]]:
    if isinstance(content, list) and len(content) > 1:
        _text(content, where)  # every part is text
        return [{"type": "text", "text": part["text"]} for part in content]
    return _text(content, where)


def _tool_use(call: Any, where: str) -> dict[str, Any]:
    if not isinstance(call, dict) or not isinstance(call.get("id"), str):
        raise invalid(f"{where} must be a tool call with a string id", where)
    function = call.get("function")
    if call.get("type", "function") != "function" or not isinstance(function, dict):
        raise invalid(f"{where}: only function tool calls are supported", where)
    name, arguments = function.get("name"), function.get("arguments", "{}")
    if not isinstance(name, str):
        raise invalid(f"{where}.function.name must be a string", where)
    if isinstance(arguments, str):
        try:
            parsed = json.loads(arguments) if arguments.strip() else {}
        except (ValueError, RecursionError):
            raise invalid(f"{where}.function.arguments is not JSON", where) from None
        parsed = check_json(parsed, f"{where}.function.arguments")
    else:
        parsed = arguments
    block: dict[str, Any] = {"type": "tool_use", "id": call["id"], "name": name, "input": parsed}
    extra = call.get("extra_content")  # what the reference runtime sends back for a Gemini call
    google = extra.get("google") if isinstance(extra, dict) else None
    signature = google.get("thought_signature") if isinstance(google, dict) else None
    if isinstance(signature, str):
        block["thought_signature"] = signature
    return block


def _messages(raw: list[Any]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(system blocks, messages) of the contract from OpenAI's message list (a string content, the
    usual case, is taken as it is; field paths are spelled only for an error)."""
    system: list[dict[str, Any]] = []
    messages: list[dict[str, Any]] = []
    results: list[dict[str, Any]] | None = None  # the tool results of the user turn just added
    for i, message in enumerate(raw):
        role = message["role"]
        content = message.get("content")
        plain = type(content) is str
        if role == "user":
            text = content if plain else _user_content(content, f"messages[{i}].content")
            messages.append({"role": "user", "content": text})
        elif role == "system" or role == "developer":
            system.append({"text": content if plain else _text(content, f"messages[{i}].content")})
        elif role == "assistant":
            text = content if plain else _text(content, f"messages[{i}].content")
            calls = message.get("tool_calls")
            if not calls:
                messages.append({"role": "assistant", "content": text})
            else:
                blocks = [{"type": "text", "text": text}] if text else []
                blocks += [_tool_use(c, f"messages[{i}].tool_calls[{j}]") for j, c in enumerate(calls)]
                messages.append({"role": "assistant", "content": blocks})
        elif role == "tool":
            call_id = message.get("tool_call_id")
            if not isinstance(call_id, str):
                where = f"messages[{i}].tool_call_id"
                raise invalid(f"{where} must be a string", where)
            result = {
                "type": "tool_result",
                "tool_use_id": call_id,
                "content": content if plain else _text(content, f"messages[{i}].content"),
                "is_error": False,
            }
            if results is not None and messages and messages[-1]["content"] is results:
                results.append(result)  # consecutive results: one user turn
            else:
                results = [result]
                messages.append({"role": "user", "content": results})
        else:
            roles = "system, developer, user, assistant, tool"
            raise invalid(f"messages[{i}].role '{role}' is not supported ({roles})", f"messages[{i}].role")
    return system, messages


def _tools(raw: list[dict[str, Any]]) -> list[dict[str, Any]]:
    tools = []
    for i, tool in enumerate(raw):
        function = tool.get("function")
        if tool.get("type") != "function" or not isinstance(function, dict):
            raise invalid(f"tools[{i}]: only function tools are supported", f"tools[{i}]")
        name = function.get("name")
        if not isinstance(name, str):
            raise invalid(f"tools[{i}].function.name must be a string", f"tools[{i}].function.name")
        description = function.get("description")
        tool_out: dict[str, Any] = {
            "name": name,
            "description": description if isinstance(description, str) else "",
        }
        if "parameters" in function:
            tool_out["parameters"] = function["parameters"]
        tools.append(tool_out)
    return tools


def chat_request(body: ChatCompletionBody) -> tuple[str, dict[str, Any]]:
    """(provider, the contract's request) of a validated Chat Completions body."""
    provider, model = split_model(body["model"])
    if body.get("n") not in (None, 1):
        raise invalid("n: only one choice per request is supported (n = 1)", "n")
    system, messages = _messages(body["messages"])
    request: dict[str, Any] = {"model": model, "system": system, "messages": messages}
    tools = body.get("tools")
    if tools:
        request["tools"] = _tools(tools)
    limit = body.get("max_completion_tokens")
    if limit is None:
        limit = body.get("max_tokens")
    if limit is not None:
        request["max_tokens"] = limit
    temperature = body.get("temperature")
    if temperature is not None:
        request["temperature"] = temperature
    extra = {key: value for key, value in body.items() if key not in _KNOWN and value is not None}
    stop = body.get("stop")
    if stop is not None:
        extra["stop"] = [stop] if isinstance(stop, str) else stop
    choice = body.get("tool_choice")
    if choice is not None:
        extra["tool_choice"] = choice
    if extra:
        request["extra"] = check_extra(extra)
    return provider, request


# -- reply ---------------------------------------------------------------------------------------


def _usage(tokens: TokenUsage) -> dict[str, Any]:
    prompt = tokens.prompt_tokens + tokens.cached_tokens + tokens.cache_write_tokens
    return {
        "prompt_tokens": prompt,
        "completion_tokens": tokens.completion_tokens,
        "total_tokens": max(tokens.total_tokens, prompt + tokens.completion_tokens),
        "prompt_tokens_details": {"cached_tokens": tokens.cached_tokens},
    }


def _head(model: str) -> dict[str, Any]:
    return {"id": "chatcmpl-" + os.urandom(12).hex(), "created": int(time.time()), "model": model}


def completion(answer: ContractResponse, model: str) -> dict[str, Any]:
    """A ``chat.completion`` object of a contract response."""
    calls = [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.name, "arguments": tool_arguments(c.arguments)},
        }
        for c in answer.tool_calls
    ]
    message: dict[str, Any] = {"role": "assistant", "content": answer.content or (None if calls else "")}
    if calls:
        message["tool_calls"] = calls
    message["refusal"] = None
    choice = {
        "index": 0,
        "message": message,
        "finish_reason": _FINISH[answer.finish_reason],
        "logprobs": None,
    }
    return {
        **_head(model),
        "object": "chat.completion",
        "choices": [choice],
        "usage": _usage(answer.tokens_used),
    }


def _event(value: Any) -> bytes:
    return b"data: " + ENCODE(value).encode() + b"\n\n"


async def _chunks(
    first: StreamChunk, items: AsyncIterator[Any], model: str, usage_wanted: bool
) -> AsyncIterator[bytes]:
    """``chat.completion.chunk`` events: role, content and tool-call deltas, the finish, usage, [DONE];
    an error item ends the stream with an error event."""
    head = {**_head(model), "object": "chat.completion.chunk"}
    started: dict[int, int] = {}
    finish: str | None = None
    tokens: TokenUsage | None = None
    yield _event({**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                        "finish_reason": None}]})  # fmt: skip
    chunk: Any = first
    while True:
        if not isinstance(chunk, StreamChunk):
            yield _event(error_body(failure(chunk)))
            return
        delta: dict[str, Any] = {}
        if chunk.delta:
            delta["content"] = chunk.delta
        if chunk.tool_calls:
            delta["tool_calls"] = [_call_delta(call, started) for call in chunk.tool_calls]
        if delta:
            yield _event({**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
        finish = chunk.finish_reason or finish
        tokens = chunk.tokens or tokens
        try:
            chunk = await anext(items)
        except StopAsyncIteration:
            break
    reason = _FINISH[finish] if finish else ("tool_calls" if started else "stop")
    yield _event({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": reason}]})
    if usage_wanted:
        yield _event({**head, "choices": [], "usage": _usage(tokens or TokenUsage())})
    yield b"data: [DONE]\n\n"


def _call_delta(call: Any, started: dict[int, int]) -> dict[str, Any]:
    """OpenAI's delta of a call: calls numbered 0, 1, … in the order they begin (a script may number
    them by its API's block index), the first delta naming the call."""
    index = started.get(call.index)
    if index is not None:
        return {"index": index, "function": {"arguments": call.arguments_delta}}
    index = started[call.index] = len(started)
    return {
        "index": index,
        "id": call.id or f"call_{index}",
        "type": "function",
        "function": {"name": call.name or "", "arguments": call.arguments_delta},
    }


# -- routes --------------------------------------------------------------------------------------


def _cut(why: Cut) -> bytes:
    return _event(error_body(CUTS[why]))


async def chat_completions(request: Request) -> Response:
    """``POST /v1/chat/completions``: JSON, or Server-Sent Events with ``"stream": true``."""
    tenant = require_tenant(request)
    body: ChatCompletionBody = await parse_body(request, ChatCompletionBody)
    try:
        name, contract = chat_request(body)
        target = await lookup(request, tenant, name)
        if body.get("stream"):
            first, items, stack = await open_stream(request, target, contract)
            usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return HeldStream(_chunks(first, items, body["model"], usage), stack, _cut)
        answer = await target.runtime.inference_for(target.provider, contract, tenant=tenant)
    except (RouteError, ProviderError, InvalidProviderRequest) as exc:
        return _refusal(exc)
    return reply(completion(answer, body["model"]))


def _model_row(provider: str, model: Any, anthropic_api: bool) -> dict[str, Any]:
    name = f"{provider}/{model.id}"
    if anthropic_api:  # the Anthropic SDK's models.list() / retrieve()
        shown = model.display_name or model.id
        return {"type": "model", "id": name, "display_name": shown, "created_at": "1970-01-01T00:00:00Z"}
    return {"id": name, "object": "model", "created": 0, "owned_by": provider}


async def v1_models(request: Request) -> Response:
    """``GET /v1/models``: ``PROVIDER/ID`` rows of every provider the tenant may use."""
    tenant = require_tenant(request)
    rows = await models_cache(request).rows(service_of(request), tenant)
    anthropic_api = bool(request.headers.get("anthropic-version"))
    data = [_model_row(p, m, anthropic_api) for p, m in rows]
    if anthropic_api:
        first, last = (data[0]["id"], data[-1]["id"]) if data else (None, None)
        return reply({"data": data, "has_more": False, "first_id": first, "last_id": last})
    return reply({"object": "list", "data": data})


async def v1_model(request: Request) -> Response:
    """``GET /v1/models/{PROVIDER/ID}``: one row of the list, or 404."""
    tenant = require_tenant(request)
    wanted = request.path_params["model"]
    anthropic_api = bool(request.headers.get("anthropic-version"))
    try:
        provider, _model = split_model(wanted)
    except RouteError as exc:
        return _refusal(exc)
    rows = await models_cache(request).rows(service_of(request), tenant, only=provider)
    for p, m in rows:
        if f"{p}/{m.id}" == wanted:
            return reply(_model_row(p, m, anthropic_api))
    message = f"no model '{wanted}' in the listings of this tenant's providers"
    return _refusal(refused(Refusal(404, "not_found", message, "model", "model_not_found")))


def _refusal(exc: Exception) -> Response:
    error = failure(exc)
    return reply(error_body(error), error.status, error.headers())


ROUTES_OPENAI: Final = [
    ("/v1/chat/completions", chat_completions, "POST"),
    ("/v1/models", v1_models, "GET"),
    ("/v1/models/{model:path}", v1_model, "GET"),
]
