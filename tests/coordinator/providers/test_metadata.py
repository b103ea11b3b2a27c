"""Metadata directives (docs/scripts/providers.md#metadata; PA8) and capabilities (PA9)."""

from __future__ import annotations

from coordinator.providers.metadata import Metadata, MimeRow, parse_metadata
from coordinator.providers.models import capabilities

GROQ_HEAD = """// @provider groq
// @description Groq inference (OpenAI-compatible, fast)
// @supports_streaming true
// @default_model llama-3.3-70b-versatile
// @max_context_tokens 131072
// @max_output_tokens 32768
fn initialize(config) { #{} }
"""


def test_pa8_all_six_parse() -> None:
    m = parse_metadata(GROQ_HEAD)
    assert (m.provider, m.description, m.default_model) == (
        "groq",
        "Groq inference (OpenAI-compatible, fast)",
        "llama-3.3-70b-versatile",
    )
    assert (m.max_context_tokens, m.max_output_tokens, m.supports_streaming) == (131072, 32768, True)


def test_pa8_defaults_bad_values_unknown_and_empty() -> None:
    src = (
        "// @provider\n// @max_context_tokens lots\n// @max_output_tokens -5\n// @supports_streaming yes\n"
        "// @frobnicate 3\n//@description\n"
    )
    m = parse_metadata(src)
    assert m == Metadata(description="")
    assert (m.provider, m.max_context_tokens, m.max_output_tokens, m.supports_streaming) == (
        None,
        8192,
        4096,
        False,
    )


def test_directives_anywhere_later_wins_and_non_comments_ignored() -> None:
    src = 'let x = "// @provider nope";\n  // @provider a\nfn f() {}\n    //   @provider   b  \n'
    assert parse_metadata(src).provider == "b"
    assert parse_metadata("/* @provider c */").provider is None


def test_types_and_mime_rows() -> None:
    src = """// @input_types text/*, image/png
// @output_types application/x-acme-scene
// @mime_type application/x-acme-scene family=model extensions=scene,scn magic=41434D45 text=false bogus=1
// @mime_type image/* family=image
// @mime_type notatype family=x
// @mime_type
// @mime_type audio/x-thing magic=XYZ text=maybe
"""
    m = parse_metadata(src)
    assert m.input_types == ("text/*", "image/png")
    assert m.output_types == ("application/x-acme-scene",)
    assert m.mime_types == (
        MimeRow("application/x-acme-scene", "model", False, ("scene", "scn"), b"ACME"),
        MimeRow("image/*", "image"),
        MimeRow("audio/x-thing"),
    )
    assert parse_metadata("").input_types == ("text/*",)


def test_pa9_capabilities() -> None:
    m = parse_metadata("// @max_context_tokens 40000\n// @max_output_tokens 8000\n")
    special = capabilities(m, {"max_context_tokens": 999})
    other = capabilities(m, {})
    assert (special.max_context_tokens, special.max_output_tokens) == (999, 8000)
    assert (other.max_context_tokens, other.max_output_tokens, other.supports_streaming) == (
        40000,
        8000,
        True,
    )
    assert capabilities(parse_metadata("// @supports_streaming false"), {}).supports_streaming is True
