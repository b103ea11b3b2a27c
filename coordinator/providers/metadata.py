"""``// @key value`` metadata directives of a provider script (docs/scripts/providers.md#metadata).

Nothing here can fail a load: unknown keys, bad values and stray lines are ignored, and a bad value
keeps the default, so a typo in a comment never takes a provider down.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from contract.text import RUST_WHITESPACE

__all__ = ["DEFAULT_CONTEXT_TOKENS", "DEFAULT_OUTPUT_TOKENS", "Metadata", "MimeRow", "parse_metadata"]

DEFAULT_CONTEXT_TOKENS = 8192
DEFAULT_OUTPUT_TOKENS = 4096

_MIME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*/(\*|[A-Za-z0-9][A-Za-z0-9!#$&^_.+-]*)$")
_HEX = re.compile(r"^(?:[0-9A-Fa-f]{2})+$")


@dataclass(frozen=True, slots=True)
class MimeRow:
    """One ``@mime_type`` registry row a provider ships (source ``provider:<name>``)."""

    mime_type: str
    family: str | None = None
    text: bool | None = None
    extensions: tuple[str, ...] = ()
    magic: bytes | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON form for ``--json`` outputs."""
        return {
            "mime_type": self.mime_type,
            "family": self.family,
            "text": self.text,
            "extensions": list(self.extensions),
            "magic": self.magic.hex() if self.magic is not None else None,
        }


@dataclass(frozen=True, slots=True)
class Metadata:
    """The directives with their defaults."""

    provider: str | None = None
    description: str = ""
    default_model: str | None = None
    max_context_tokens: int = DEFAULT_CONTEXT_TOKENS
    max_output_tokens: int = DEFAULT_OUTPUT_TOKENS
    supports_streaming: bool = False
    input_types: tuple[str, ...] = ("text/*",)
    output_types: tuple[str, ...] = ("text/*",)
    mime_types: tuple[MimeRow, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        """JSON form for ``rhaipool validate --json``."""
        return {
            "provider": self.provider,
            "description": self.description,
            "default_model": self.default_model,
            "max_context_tokens": self.max_context_tokens,
            "max_output_tokens": self.max_output_tokens,
            "supports_streaming": self.supports_streaming,
            "input_types": list(self.input_types),
            "output_types": list(self.output_types),
            "mime_types": [row.to_dict() for row in self.mime_types],
        }


_WS_SPLIT = re.compile(f"[{RUST_WHITESPACE}]")
_UINT = re.compile(r"\+?[0-9]+")
_U64_MAX = 2**64 - 1


def _uint(text: str) -> int | None:
    """Rust's ``parse::<usize>``: ASCII digits with an optional ``+``, at most u64::MAX."""
    if not _UINT.fullmatch(text):
        return None
    value = int(text)
    return value if value <= _U64_MAX else None


def _bool(text: str) -> bool | None:
    return {"true": True, "false": False}.get(text)


def _type_list(text: str) -> tuple[str, ...]:
    """Comma-separated mime patterns, trimmed and lowercased; an item that is not ``a/b``-shaped is
    unparsable and dropped, and a list with no pattern left means the default, text only."""
    items = (t.strip(RUST_WHITESPACE).lower() for t in text.split(","))
    kept = tuple(t for t in items if "/" in t and not _WS_SPLIT.search(t))
    return kept or ("text/*",)


def parse_mime_row(value: str) -> MimeRow | None:
    """``type/subtype k=v ...``; a row without a valid type is dropped, unknown keys ignored."""
    words = value.split()
    if not words or not _MIME.match(words[0]):
        return None
    fields: dict[str, Any] = {}
    for word in words[1:]:
        key, sep, val = word.partition("=")
        if not sep:
            continue
        if key == "family" and val:
            fields["family"] = val
        elif key == "text" and _bool(val) is not None:
            fields["text"] = _bool(val)
        elif key == "extensions" and val:
            fields["extensions"] = tuple(e for e in val.split(",") if e)
        elif key == "magic" and _HEX.match(val):
            fields["magic"] = bytes.fromhex(val)
    return MimeRow(words[0].lower(), **fields)


def _directives(source: str) -> list[tuple[str, str]]:
    """Every ``// @key value`` line, anywhere in the file, in order."""
    out = []
    for line in source.split("\n"):  # Rust's lines(): only \n ends a line (a \r is trimmed below)
        text = line.strip(RUST_WHITESPACE)
        if not text.startswith("//"):
            continue
        text = text[2:].strip(RUST_WHITESPACE)
        if not text.startswith("@"):
            continue
        key, value = [*_WS_SPLIT.split(text[1:], maxsplit=1), ""][:2]
        out.append((key, value.strip(RUST_WHITESPACE)))
    return out


def parse_metadata(source: str) -> Metadata:
    """Parse all directives; later duplicates overwrite earlier ones, ``@mime_type`` rows accumulate."""
    values: dict[str, Any] = {}
    rows: list[MimeRow] = []
    for key, value in _directives(source):
        parsed: Any = None
        if key in ("provider", "default_model"):
            parsed = value or None
        elif key == "description":
            parsed = value
        elif key in ("max_context_tokens", "max_output_tokens"):
            parsed = _uint(value)
        elif key == "supports_streaming":
            parsed = _bool(value)
        elif key in ("input_types", "output_types"):
            parsed = _type_list(value)
        elif key == "mime_type":
            row = parse_mime_row(value)
            if row is not None:
                rows.append(row)
            continue
        if parsed is not None:
            values[key] = parsed
    return Metadata(**values, mime_types=tuple(rows))
