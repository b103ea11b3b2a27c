"""The request bodies of the OpenAI and Anthropic fronts: what validates them and what ``openapi.json``
documents.

Strict where a field is read (``"10"`` is not 10, a number must be finite and fit the runtime), lenient
where real SDKs are: every body and message may carry fields these types do not name (an SDK sends
many optional ones). Unknown top-level fields go to the contract request's ``extra``
(:func:`check_extra` holds them to the runtime's number range); a message's unknown fields are ignored.
Typed dicts, so a valid body is handed on as the dict pydantic-core built, with no model per request.
"""

from __future__ import annotations

from typing import Any, Final, Literal, Required

from pydantic import ConfigDict, TypeAdapter, ValidationError, with_config
from typing_extensions import TypedDict

from coordinator.service.front.common import invalid
from coordinator.service.schemas import Count, Finite, Json

__all__ = [
    "AnthropicErrorReply",
    "AnthropicMessage",
    "ChatCompletionBody",
    "ChatCompletionReply",
    "ChatMessage",
    "InputTokens",
    "MessageReply",
    "MessagesBody",
    "ModelsReply",
    "OpenAIErrorReply",
    "check_extra",
    "check_json",
]

_LENIENT: Final = ConfigDict(extra="allow", strict=True, allow_inf_nan=False)


@with_config(_LENIENT)
class ChatMessage(TypedDict, total=False):
    """One Chat Completions message (``content`` a string or content parts)."""

    role: Required[Literal["system", "developer", "user", "assistant", "tool", "function"]]
    content: str | list[dict[str, Json]] | None
    tool_calls: list[dict[str, Json]] | None
    tool_call_id: str
    name: str


@with_config(_LENIENT)
class StreamOptions(TypedDict, total=False):
    include_usage: bool


@with_config(_LENIENT)
class ChatCompletionBody(TypedDict, total=False):
    """``POST /v1/chat/completions``: ``model`` is ``PROVIDER/MODEL``; other fields go to ``extra``."""

    model: Required[str]
    messages: Required[list[ChatMessage]]
    tools: list[dict[str, Json]] | None
    tool_choice: Json
    max_tokens: Count | None
    max_completion_tokens: Count | None
    temperature: Finite | None
    stop: str | list[str] | None
    stream: bool | None
    stream_options: StreamOptions | None
    n: Count | None


@with_config(_LENIENT)
class AnthropicMessage(TypedDict, total=False):
    """One Messages API message (``content`` a string or content blocks)."""

    role: Required[Literal["user", "assistant"]]
    content: Required[str | list[dict[str, Json]]]


@with_config(_LENIENT)
class MessagesBody(TypedDict, total=False):
    """``POST /v1/messages``: ``model`` is ``PROVIDER/MODEL``; other fields go to ``extra``."""

    model: Required[str]
    messages: Required[list[AnthropicMessage]]
    system: str | list[dict[str, Json]] | None
    max_tokens: Count | None
    tools: list[dict[str, Json]] | None
    tool_choice: Json
    stop_sequences: list[str] | None
    temperature: Finite | None
    stream: bool | None


_EXTRA: Final = TypeAdapter(dict[str, Json])
_JSON: Final = TypeAdapter(Json)


def check_json(value: Any, where: str) -> Any:
    """JSON the front parsed itself (a tool call's ``arguments``), held to the runtime's number range."""
    try:
        return _JSON.validate_python(value)
    except ValidationError as exc:
        raise invalid(f"field '{where}': {exc.errors(include_url=False)[0]['msg']}", where) from None


def check_extra(extra: dict[str, Any]) -> dict[str, Any]:
    """``extra`` as given, or a 400 when a number in it is out of the runtime's range."""
    try:
        return _EXTRA.validate_python(extra)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"][:1])
        raise invalid(f"field '{where}': {first['msg']}", where) from None


# -- replies (documented in openapi.json; the service does not validate its own replies) ----------

_REPLY: Final = ConfigDict(extra="forbid")


@with_config(_REPLY)
class ChatCompletionReply(TypedDict):
    """A ``chat.completion``: ``choices[0].message`` has ``content`` and ``tool_calls`` (JSON-string
    arguments); ``finish_reason`` is ``stop``, ``tool_calls`` or ``length``."""

    id: str
    object: Literal["chat.completion"]
    created: int
    model: str
    choices: list[dict[str, Any]]
    usage: dict[str, Any]


@with_config(_REPLY)
class ModelsReply(TypedDict):
    """``PROVIDER/ID`` rows (OpenAI's list; with an ``anthropic-version`` header, Anthropic's)."""

    object: Literal["list"]
    data: list[dict[str, Any]]


@with_config(_REPLY)
class MessageReply(TypedDict):
    """A Messages API ``message``: ``text`` and ``tool_use`` blocks, ``stop_reason``, ``usage``."""

    id: str
    type: Literal["message"]
    role: Literal["assistant"]
    model: str
    content: list[dict[str, Any]]
    stop_reason: str
    stop_sequence: str | None
    usage: dict[str, int]


@with_config(_REPLY)
class InputTokens(TypedDict):
    """The provider's count of the prompt."""

    input_tokens: int


@with_config(_REPLY)
class OpenAIErrorDetail(TypedDict):
    message: str
    type: str
    param: str | None
    code: str | None


@with_config(_REPLY)
class OpenAIErrorReply(TypedDict):
    """An error in the OpenAI API's shape."""

    error: OpenAIErrorDetail


@with_config(_REPLY)
class AnthropicErrorDetail(TypedDict):
    type: str
    message: str


@with_config(_REPLY)
class AnthropicErrorReply(TypedDict):
    """An error in the Anthropic API's shape."""

    type: Literal["error"]
    error: AnthropicErrorDetail
