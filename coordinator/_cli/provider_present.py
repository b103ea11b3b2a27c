"""Output of the provider commands: answers, chunks, listings, and failures that explain themselves."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from contract.budgets import BUDGETS
from coordinator.providers.errors import ProviderError, RateLimitExceeded
from coordinator.providers.failures import FAILURE_KINDS, REASON_REMEDIES
from coordinator.providers.models import ModelInfo
from coordinator.providers.response import Response, StreamChunk, TokenUsage
from proto.vocabulary import Kind

__all__ = [
    "FailureFacts",
    "chunk_text",
    "facts_from_host_error",
    "limit_value",
    "models_text",
    "plain_transport",
    "provider_error_fields",
    "provider_error_text",
    "response_text",
    "script_place",
    "server_message",
    "usage_text",
]


def usage_text(usage: TokenUsage) -> str:
    """``tokens: 60 prompt + 30 cached + 10 cache-write + 5 completion = 105 (cost $0.0012)``."""
    text = f"tokens: {usage.prompt_tokens} prompt"
    if usage.cached_tokens:
        text += f" + {usage.cached_tokens} cached"
    if usage.cache_write_tokens:
        text += f" + {usage.cache_write_tokens} cache-write"
    text += f" + {usage.completion_tokens} completion = {usage.total_tokens}"
    return text + (f" (cost ${usage.cost_usd:g})" if usage.cost_usd is not None else " (cost unknown)")


def response_text(response: Response) -> str:
    """The answer, its tool calls, parts, usage and finish reason."""
    lines = [response.content] if response.content else []
    for call in response.tool_calls:
        lines.append(f"tool call {call.id} {call.name}({json.dumps(call.arguments, ensure_ascii=False)})")
    for part in response.parts:
        lines.append(f"part {part.mime_type} {part.name or ''} ({len(part.data)} bytes)".replace("  ", " "))
    lines.append(f"-- finish: {response.finish_reason}; {usage_text(response.tokens_used)}")
    return "\n".join(lines)


def chunk_text(chunk: StreamChunk) -> str:
    """What a streamed chunk adds to the terminal."""
    text = chunk.delta
    for call in chunk.tool_calls:
        text += f"[tool {call.index} {call.name or ''}{call.arguments_delta}]"
    if chunk.finish_reason is not None or chunk.tokens is not None:
        tail = [f"finish: {chunk.finish_reason}"] if chunk.finish_reason else []
        tail += [usage_text(chunk.tokens)] if chunk.tokens is not None else []
        text += f"\n-- {'; '.join(tail)}"
    return text


def models_text(provider: str, rows: list[ModelInfo]) -> str:
    """One line per model, from the provider's own listing."""
    width = max(len(r.id) for r in rows)
    lines = [f"{provider}: {len(rows)} model(s) from the provider's own listing"]
    for row in rows:
        name = f"  {row.display_name}" if row.display_name and row.display_name != row.id else ""
        lines.append(
            f"  {row.id:<{width}}  window {row.max_context_tokens}, output {row.max_output_tokens}{name}"
        )
    return "\n".join(lines)


# -- failures -------------------------------------------------------------------------------------------

_STATUS = re.compile(r"^HTTP (\d{3})\b[^:]*:?\s*(.*)$", re.DOTALL)
_ADDRESS = re.compile(r"\('([^']+)', (\d+)\)")
_SERVER_TEXT_CHARS = 300


@dataclass
class FailureFacts:
    """What the coordinator saw of the last failed HTTP request (status, label, server text, address)."""

    failure_kind: str | None = None
    status: int | None = None
    server_message: str | None = None
    transport_text: str | None = None
    retry_after: int | None = None
    attempts: int = 1
    retries: list[str] = field(default_factory=list)


def server_message(body: str) -> str:
    """The API's own message from an error body (``error.message``, ``message``, ``detail``), trimmed."""
    text = body.strip()
    try:
        doc: Any = json.loads(text)
    except ValueError:
        doc = None
    if isinstance(doc, dict):
        inner = doc.get("error")
        for candidate in (
            inner.get("message") if isinstance(inner, dict) else inner,
            doc.get("message"),
            doc.get("detail"),
        ):
            if isinstance(candidate, str) and candidate.strip():
                text = candidate.strip()
                break
    text = " ".join(text.split())
    return text if len(text) <= _SERVER_TEXT_CHARS else text[: _SERVER_TEXT_CHARS - 1] + "…"


def plain_transport(failure_kind: str | None, text: str, host: str | None) -> str:
    """An OS/httpx error chain in plain words: ``connection refused by 127.0.0.1:18099``."""
    found = _ADDRESS.search(text)
    where = f"{found.group(1)}:{found.group(2)}" if found else (host or "the provider")
    if failure_kind == "connection-refused":
        return f"connection refused by {where}"
    if failure_kind == "dns-failure":
        return f"the host name of {where} did not resolve"
    if failure_kind == "timeout":
        return (
            f"no complete answer from {where} in time ({text})" if "within" in text else f"{where} timed out"
        )
    if failure_kind == "tls-failure":
        return f"TLS handshake with {where} failed"
    if failure_kind == "connection-dropped":
        return f"{where} closed the connection before the answer was complete"
    return re.sub(r"\[Errno \d+\]\s*", "", text)


def facts_from_host_error(
    value: dict[str, Any], failure_kind: str | None, server_text: str | None
) -> FailureFacts:
    """The facts of one failed host request (the map a script saw plus what egress worked out)."""
    facts = FailureFacts(failure_kind=failure_kind)
    message = str(value.get("message", ""))
    matched = _STATUS.match(message)
    if value.get("kind") == "rate_limited":
        facts.status, facts.failure_kind = 429, failure_kind or "rate-limited"
        facts.retry_after = value.get("retry_after")
        facts.server_message = server_message(server_text) if server_text else None
    elif matched:
        facts.status = int(matched.group(1))
        facts.server_message = server_message(matched.group(2)) or None
    elif value.get("kind") == "transport":
        facts.transport_text = message
    return facts


def _label_and_remedy(err: ProviderError, facts: FailureFacts) -> tuple[str | None, str | None]:
    label = facts.failure_kind or err.reason
    if label is None and isinstance(err, RateLimitExceeded):
        label = "rate-limited"
    remedy = FAILURE_KINDS.get(label or "") or REASON_REMEDIES.get(label or "")
    return label, remedy


def provider_error_fields(err: ProviderError, facts: FailureFacts, host: str | None) -> dict[str, Any]:
    """The ``--json`` error body: class, message, transient, failure_kind, status,
    server_message, attempts, remedy."""
    label, remedy = _label_and_remedy(err, facts)
    body = err.to_dict()
    if facts.transport_text is not None and label in FAILURE_KINDS:
        body["message"] = plain_transport(label, facts.transport_text, host)
    body.update(
        failure_kind=label,
        status=facts.status,
        server_message=facts.server_message,
        attempts=facts.attempts,
        remedy=remedy,
    )
    body.update(script_place(err))
    return {k: v for k, v in body.items() if v is not None}


def provider_error_text(fields: dict[str, Any]) -> str:
    """``[auth-failed] HTTP 401: Invalid API Key (1 attempt) - remedy`` for a person."""
    head = f"[{fields['failure_kind']}] " if fields.get("failure_kind") else ""
    if fields.get("status") is not None:
        what = f"HTTP {fields['status']}"
        what += f": {fields['server_message']}" if fields.get("server_message") else ""
        if fields["class"] == "RateLimitExceeded" and not fields.get("server_message"):
            what += " (rate limit exceeded)"
    else:
        what = fields["message"]
    place = f" at {fields['file']}:{fields['line']}:{fields.get('column', 0)}" if fields.get("line") else ""
    tries = fields.get("attempts", 1)
    attempts = f" after {tries} attempts" if tries > 1 else ""
    budget = f" (limit: {fields['limit']} = {fields['limit_value']})" if fields.get("limit_value") else ""
    text = f"{fields['class']}: {head}{what}{budget}{place}{attempts}"
    return text + (f"\n  remedy: {fields['remedy']}" if fields.get("remedy") else "")


def script_place(err: BaseException) -> dict[str, Any]:
    """``file``/``line``/``column`` and, for an exceeded budget,
    ``limit`` and ``limit_value``, from the cause."""
    out: dict[str, Any] = {}
    cause: BaseException | None = err
    while cause is not None:
        line = getattr(cause, "line", None)
        if line and "line" not in out:
            out.update(line=line, column=getattr(cause, "column", None) or 0)
            out["file"] = getattr(cause, "script", None) or getattr(cause, "name", None)
        limit = getattr(cause, "limit", None)
        if isinstance(limit, str) and limit and "limit" not in out:
            out["limit"] = limit
            out["limit_value"] = limit_value(limit)
        cause = cause.__cause__
    return {k: v for k, v in out.items() if v is not None}


def limit_value(limit: str) -> int | str | None:
    """The value of a provider engine budget by the name a LimitExceeded carries."""
    budgets = BUDGETS[Kind.PROVIDER]
    if limit == "call_depth":
        return budgets["max_call_levels"]
    if limit == "data_size":
        return (
            f"strings {budgets['max_string_size']}, arrays {budgets['max_array_size']},"
            f" maps {budgets['max_map_size']}"
        )
    return budgets.get(f"max_{limit}")
