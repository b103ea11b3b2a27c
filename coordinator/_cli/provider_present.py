"""Human-readable output of the provider commands (the ``--json`` forms live on the values themselves)."""

from __future__ import annotations

import json

from coordinator.providers.models import ModelInfo
from coordinator.providers.response import Response, StreamChunk, TokenUsage

__all__ = ["chunk_text", "models_text", "response_text", "usage_text"]


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
