"""Binary ``parts`` of a response or chunk: bytes from a blob or base64, plus mime sniffing
(docs/scripts/providers.md#inferencestate-request).

A part whose declared type is missing or unparsable is sniffed from its first bytes, provider
``@mime_type`` rows first and then a small built-in table, so an image a script forgot to label still
arrives as an image; when nothing matches it stays ``application/octet-stream``.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Any

from coordinator.providers.metadata import MimeRow

__all__ = [
    "OCTET_STREAM",
    "Part",
    "decode_standard",
    "parse_parts",
    "sniff",
]

OCTET_STREAM = "application/octet-stream"
_MIME = re.compile(
    r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*"
    r"(\s*;\s*[A-Za-z0-9!#$&^_.+-]+=(\"[^\"]*\"|[A-Za-z0-9!#$&^_.+-]+))*$"
)
_BUILTIN_MAGIC: tuple[tuple[bytes, str], ...] = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"OggS", "audio/ogg"),
    (b"fLaC", "audio/flac"),
    (b"ID3", "audio/mpeg"),
    (b"PK\x03\x04", "application/zip"),
)


@dataclass(frozen=True, slots=True)
class Part:
    """One binary output (image, audio...) with its type and optional file name."""

    data: bytes
    mime_type: str
    name: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """Summary for ``--json`` output: type, name, size (never the bytes)."""
        out: dict[str, Any] = {"mime_type": self.mime_type, "size": len(self.data)}
        if self.name is not None:
            out["name"] = self.name
        return out


def sniff(data: bytes, rows: list[MimeRow] | None = None) -> str:
    """Guess a type from magic bytes: provider rows, then RIFF containers, then the built-in table."""
    for row in rows or ():
        if row.magic and "*" not in row.mime_type and data.startswith(row.magic):
            return row.mime_type
    if data[:4] == b"RIFF" and data[8:12] in (b"WAVE", b"WEBP"):
        return "audio/wav" if data[8:12] == b"WAVE" else "image/webp"
    for magic, mime in _BUILTIN_MAGIC:
        if data.startswith(magic):
            return mime
    return OCTET_STREAM


def _bytes_of(item: dict[str, Any]) -> bytes | None:
    raw = item.get("bytes")
    if isinstance(raw, list):
        return bytes(b for b in raw if isinstance(b, int) and not isinstance(b, bool) and 0 <= b <= 255)
    data = item.get("data")
    if isinstance(data, str):
        return decode_standard(data.strip())
    return None


def decode_standard(text: str) -> bytes | None:
    """Standard padded base64, canonical only (Rust's ``STANDARD`` engine): Python alone would also take
    extra padding (``AQID====``) and non-zero trailing bits (``AR==``)."""
    try:
        raw = base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        return None
    return raw if base64.b64encode(raw).decode("ascii") == text else None


def parse_parts(raw: Any, rows: list[MimeRow] | None = None) -> list[Part]:
    """Keep every item that yields at least one byte; the rest are skipped silently."""
    if not isinstance(raw, list):
        return []
    parts = []
    for item in raw:
        if not isinstance(item, dict):
            continue
        data = _bytes_of(item)
        if not data:
            continue
        declared = item.get("mime_type")
        if isinstance(declared, str) and _MIME.match(declared.strip()):
            mime = declared.strip()
        else:
            mime = sniff(data, rows)
        name = item.get("name")
        parts.append(Part(data, mime, name if isinstance(name, str) else None))
    return parts
