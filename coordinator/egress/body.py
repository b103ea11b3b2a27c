"""Reading a response body safely: the size cap and the "is this really text?" checks (SPEC §3.15).

A script only ever receives text. A 2xx answer whose content type is not text-like, or whose bytes
decode to mostly replacement characters, is refused with an ``api`` error that says so, instead of
handing the script a page of mojibake it would then fail to parse in a confusing way.
"""

from __future__ import annotations

import codecs
from collections.abc import Awaitable, Callable

import httpx

from coordinator.egress.errors import HostError

__all__ = [
    "MOJIBAKE_MIN_CHARS",
    "MOJIBAKE_RATIO",
    "charset_of",
    "decode_lossy",
    "is_text_like",
    "read_capped",
    "readable_text",
]

MOJIBAKE_MIN_CHARS = 64
MOJIBAKE_RATIO = 0.10
_TEXT_MARKERS = ("json", "xml", "javascript", "x-yaml", "urlencoded")


def charset_of(response: httpx.Response) -> str:
    """The declared charset when Python knows it, else UTF-8."""
    name = response.charset_encoding or "utf-8"
    try:
        codecs.lookup(name)
    except LookupError:
        return "utf-8"
    return name


def decode_lossy(response: httpx.Response, raw: bytes | bytearray) -> str:
    """Decode like the reference's ``text()``: unknown bytes become U+FFFD."""
    return raw.decode(charset_of(response), errors="replace")


def is_text_like(content_type: str) -> bool:
    """``text/*`` or a type naming json/xml/javascript/x-yaml/urlencoded."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media.startswith("text/") or any(marker in media for marker in _TEXT_MARKERS)


async def read_capped(
    response: httpx.Response, cap: int, reserve: Callable[[int], Awaitable[None]] | None = None
) -> bytearray:
    """The whole body, or an ``api`` HostError as soon as it exceeds ``cap`` bytes.

    ``reserve(n)`` is awaited before ``n`` more bytes are kept (the coordinator-wide budgets): all of
    a declared ``Content-Length`` at once, then whatever arrives beyond it.
    """
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise _too_large()
    reserved = int(declared) if declared.isdigit() else 0
    if reserve is not None:
        await reserve(reserved)
    body = bytearray()  # grown in place: joining chunks at the end would hold the body twice
    async for chunk in response.aiter_bytes():
        if len(body) + len(chunk) > cap:
            raise _too_large()
        if reserve is not None and len(body) + len(chunk) > reserved:
            await reserve(len(body) + len(chunk) - reserved)
            reserved = len(body) + len(chunk)
        body += chunk
    return body


def _too_large() -> HostError:
    return HostError(
        {
            "kind": "api",
            "message": "response too large: the body exceeded this provider's max_response_bytes",
        },
        "malformed-response",
    )


def readable_text(response: httpx.Response, raw: bytes | bytearray) -> str:
    """Decode a 2xx body, refusing binary content types and bodies that do not decode."""
    content_type = response.headers.get("content-type")
    if content_type is not None and not is_text_like(content_type):
        media = content_type.split(";", 1)[0].strip()
        raise HostError(
            {
                "kind": "api",
                "message": f"unreadable body: the response is {media}, not text - "
                "this fetch read bytes, not a document",
            },
            "malformed-response",
        )
    text = decode_lossy(response, raw)
    bad = text.count("\ufffd")
    if len(text) >= MOJIBAKE_MIN_CHARS and bad > MOJIBAKE_RATIO * len(text):
        raise HostError(
            {
                "kind": "api",
                "message": f"unreadable body: {content_type or 'the body'} decoded to mostly replacement "
                "characters, so it was compressed or in an encoding this client could not decode. "
                "This fetch did not read the page.",
            },
            "malformed-response",
        )
    return text
