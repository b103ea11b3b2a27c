"""One name, one meaning, one definition: the default tenant and Rust's whitespace set are each written
once, and every module that needs them imports that one (issue 23 point 7)."""

from __future__ import annotations

import re
from pathlib import Path

from contract.text import RUST_WHITESPACE
from coordinator.tenancy import DEFAULT_TENANT

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted(
    p for package in ("proto", "contract", "worker", "coordinator") for p in (ROOT / package).rglob("*.py")
)


def test_rust_whitespace_is_unicode_white_space() -> None:
    """What Rust's ``char::is_whitespace`` accepts: Python's ``isspace`` without U+001C..U+001F."""
    python = {chr(c) for c in range(0x110000) if chr(c).isspace()}
    assert set(RUST_WHITESPACE) == python - set("\x1c\x1d\x1e\x1f")
    assert len(RUST_WHITESPACE) == len(set(RUST_WHITESPACE)) == 25


def test_the_whitespace_set_is_written_once() -> None:
    """A character only White_Space has (U+2028 LINE SEPARATOR) written as an escape marks a copy."""
    copies = [p.relative_to(ROOT).as_posix() for p in SOURCES if "\\u2028" in p.read_text()]
    assert copies == ["contract/text.py"]


def test_the_default_tenant_is_defined_once() -> None:
    assert DEFAULT_TENANT == "default"
    defined = re.compile(r"^DEFAULT_TENANT\b.*=", re.MULTILINE)
    written = re.compile(r"""tenant\b[^=\n]*=\s*["']default["']""")
    definitions = [p.relative_to(ROOT).as_posix() for p in SOURCES if defined.search(p.read_text())]
    literals = [
        f"{p.relative_to(ROOT).as_posix()}: {m.group(0)}"
        for p in SOURCES
        for m in written.finditer(p.read_text())
    ]
    assert definitions == ["coordinator/tenancy.py"]
    assert literals == []
