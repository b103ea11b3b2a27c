"""Reading a response body safely: the size cap and the "is this really text?" checks
(docs/scripts/host-functions.md#transport).

A script only ever receives text. A 2xx answer whose content type is not text-like, or whose bytes
decode to mostly replacement characters, is refused with an ``api`` error that says so, instead of
handing the script a page of mojibake it would then fail to parse in a confusing way.
"""

from __future__ import annotations

import codecs
import email.message
import functools
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
from aiohttp.http_exceptions import ContentLengthError, TransferEncodingError

from coordinator.egress.encoding import BodyDecoder
from coordinator.egress.errors import BodyIncomplete, HostError

__all__ = [
    "MOJIBAKE_MIN_CHARS",
    "MOJIBAKE_RATIO",
    "body_chunks",
    "charset_of",
    "decode_lossy",
    "is_text_like",
    "read_capped",
    "readable_text",
]

MOJIBAKE_MIN_CHARS = 64
MOJIBAKE_RATIO = 0.10
_TEXT_MARKERS = ("json", "xml", "javascript", "x-yaml", "urlencoded")


def charset_of(response: aiohttp.ClientResponse) -> str:
    """The declared charset when Python knows it, else UTF-8."""
    return _charset_named_by(response.headers.get("content-type", ""))


@functools.lru_cache(maxsize=256)
def _charset_named_by(content_type: str) -> str:
    """Parsed once per distinct header value: a provider answers with the same one every time."""
    message = email.message.Message()
    message["content-type"] = content_type
    name = message.get_content_charset(failobj=None) or "utf-8"
    try:
        codecs.lookup(name)
    except LookupError:
        return "utf-8"
    return name


def decode_lossy(response: aiohttp.ClientResponse, raw: bytes | bytearray) -> str:
    """Decode like the reference's ``text()``: unknown bytes become U+FFFD."""
    return raw.decode(charset_of(response), errors="replace")


def is_text_like(content_type: str) -> bool:
    """``text/*`` or a type naming json/xml/javascript/x-yaml/urlencoded."""
    media = content_type.split(";", 1)[0].strip().lower()
    return media.startswith("text/") or any(marker in media for marker in _TEXT_MARKERS)


async def body_chunks(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    """The body's decoded chunks as they arrive (empty ones skipped); a cut-off body raises BodyIncomplete."""
    decoder = BodyDecoder(response.headers.getall("content-encoding", ()))
    received = 0
    try:
        async for raw in response.content.iter_any():
            received += len(raw)
            data = decoder.decode(raw)
            if data:
                yield data
    except aiohttp.ClientPayloadError as exc:
        raise _incomplete(response, exc, received) from exc
    tail = decoder.flush()
    if tail:
        yield tail


def _incomplete(
    response: aiohttp.ClientResponse, exc: aiohttp.ClientPayloadError, received: int
) -> BodyIncomplete:
    """The peer closed early: said in the words egress has always used (received / expected bytes)."""
    prefix = "peer closed connection without sending complete message body"
    declared = response.headers.get("content-length", "")
    if isinstance(exc.__cause__, ContentLengthError) and declared.isdigit():
        return BodyIncomplete(f"{prefix} (received {received} bytes, expected {int(declared)})")
    if isinstance(exc.__cause__, TransferEncodingError):
        return BodyIncomplete(f"{prefix} (incomplete chunked read)")
    return BodyIncomplete(str(exc))


async def read_capped(
    response: aiohttp.ClientResponse, cap: int, reserve: Callable[[int], Awaitable[None]] | None = None
) -> bytearray:
    """The whole body, or an ``api`` HostError as soon as it exceeds ``cap`` bytes.

    ``reserve(n)`` is awaited before ``n`` more bytes are kept (the coordinator-wide budgets): all of
    a declared ``Content-Length`` at once, then whatever arrives beyond it.
    """
    declared = response.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > cap:
        raise _too_large()
    reserved = int(declared) if declared.isdigit() else 0
    if reserve is not None and reserved:
        await reserve(reserved)
    content = response.content
    if content.is_eof() and content.exception() is None and "content-encoding" not in response.headers:
        # The whole body came with the headers (a small answer): taken as it lies, no reads to wait for.
        body = bytearray(content.read_nowait())
        if len(body) > cap:
            raise _too_large()
        if reserve is not None and len(body) > reserved:
            await reserve(len(body) - reserved)
        return body
    body = bytearray()  # grown in place: joining chunks at the end would hold the body twice
    async for chunk in body_chunks(response):
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


def readable_text(response: aiohttp.ClientResponse, raw: bytes | bytearray) -> str:
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
