"""Pure helper functions of provider engines (docs/scripts/host-functions.md), run inside the sandboxed
worker.

``parse_json`` and ``to_json`` come from the binding itself (``Engine(json_functions=True)``), so they
are not repeated here. The brokered functions (``http_get``, ``http_post``, ``stream_request``,
``env_var``) are registered by the worker's host bridge from ``proto.host.BROKERED_FUNCTIONS``, not here:
they leave the worker.

Script-catchable failures are raised as ``rhai.Throw(<string>)`` with the reference's prefixes.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any
from urllib.parse import quote

import rhai

from contract import tokens
from contract.text import RUST_WHITESPACE

__all__ = [
    "FUNCTIONS",
    "SIGNATURES",
    "count_tokens_heuristic",
    "decode_base64",
    "encode_base64",
    "encode_uri",
    "parse_sse",
]


def parse_sse(chunk: Any) -> Any:
    """One SSE payload → value: trim, drop one ``data:`` prefix; empty, ``[DONE]`` or not JSON → ()."""
    if not isinstance(chunk, str):
        return None
    text = chunk.strip(RUST_WHITESPACE)  # Rust's `trim`: Python's `strip()` also eats U+001C..U+001F
    if text.startswith("data:"):
        text = text[5:].strip(RUST_WHITESPACE)
    if not text or text == "[DONE]":
        return None
    try:
        return rhai.parse_json(text)
    except (ValueError, TypeError, OverflowError, RecursionError):
        return None


def encode_uri(text: str) -> str:
    """Percent-encode every UTF-8 byte except ``A-Z a-z 0-9 - _ . ~`` (upper-case hex)."""
    return quote(text, safe="-_.~")


def encode_base64(text: str) -> str:
    """Standard, padded base64 of the UTF-8 bytes."""
    return base64.b64encode(text.encode("utf-8")).decode("ascii")


def decode_base64(text: str) -> str:
    """Standard padded base64 → UTF-8 text; failures are thrown strings the script can catch."""
    try:
        raw = base64.b64decode(text.encode("ascii"), validate=True)
    except (binascii.Error, ValueError, UnicodeEncodeError) as exc:
        raise rhai.Throw(f"decode_base64: not valid base64: {exc}") from None
    if base64.b64encode(raw).decode("ascii") != text:
        # Rust's STANDARD engine accepts only the canonical spelling: no extra padding, no stray bits.
        raise rhai.Throw("decode_base64: not valid base64: not the canonical padded encoding") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise rhai.Throw(f"decode_base64: decoded {len(raw)} bytes that are not UTF-8 text ({exc})") from None


def count_tokens_heuristic(text: str, hint: str) -> int:
    """openai → cl100k; anthropic → ceil(bytes/3.5) in f32; gemini and anything else → ceil(bytes/4).

    The arithmetic is ``contract.tokens``, shared with the coordinator's own fallback count
    (docs/scripts/providers.md#count_tokensstate-text-model)."""
    return tokens.estimate(text, hint)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "count_tokens_heuristic": count_tokens_heuristic,
    "decode_base64": decode_base64,
    "encode_base64": encode_base64,
    "encode_uri": encode_uri,
    "parse_sse": parse_sse,
}

SIGNATURES: dict[str, tuple[str, ...]] = {
    "count_tokens_heuristic": ("string", "string"),
    "decode_base64": ("string",),
    "encode_base64": ("string",),
    "encode_uri": ("string",),
    "parse_sse": ("string",),
}
"""The reference registers every helper with ``&str`` parameters: other argument types are Rhai's own
catchable "function not found" (docs/scripts/errors.md#errors-a-script-can-catch), never a Python error inside
the helper."""
