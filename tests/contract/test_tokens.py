"""One token arithmetic for both sides: the worker's helpers and the coordinator's fallbacks agree."""

from __future__ import annotations

import pytest
import rhai

from contract import tokens
from coordinator.providers.tokens import count_by_model, family_for
from coordinator.regions.tokens import estimate_tokens
from worker.functions.provider import count_tokens_heuristic
from worker.functions.region import count_tokens

TEXTS = ["", "a", "abcd", "abcde", "héllo wörld", "日本語のテキスト", "<|endoftext|> special", "x" * 1001]
#: A model id of each family, and the hint a script passes for the same rule.
FAMILIES = [("gpt-4", "openai"), ("claude-3-opus", "anthropic"), ("gemini-2.0-flash", "gemini")]


@pytest.mark.parametrize("text", TEXTS)
def test_region_helper_and_region_budget_count_alike(text: str) -> None:
    assert count_tokens(text) == estimate_tokens(text) == tokens.quarter_bytes(text)


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize(("model", "hint"), FAMILIES)
def test_worker_heuristic_and_coordinator_fallback_count_alike(text: str, model: str, hint: str) -> None:
    assert count_tokens_heuristic(text, hint) == count_by_model(text, model)


def test_the_families_are_the_references() -> None:
    assert [family_for(m) for m, _ in FAMILIES] == ["openai", "anthropic", "other"]
    assert count_by_model("abcdefg", "claude-3") == 2 == tokens.third_and_a_half_bytes("abcdefg")
    assert count_by_model("<|endoftext|>", "gpt-4") == 1  # a special token is one token, as the reference's


def test_both_sides_count_with_the_bindings_tiktoken() -> None:
    """The worker's ``openai`` hint and the coordinator's fallback are one counter: tiktoken-rs."""
    assert count_tokens_heuristic("hello world", "openai") == rhai.tiktoken_count("hello world", "gpt-4")
    assert count_by_model("hello world", "gpt-4o") == rhai.tiktoken_count("hello world", "gpt-4o")
    text = "日本語のテキスト"
    assert count_by_model(text, "gpt-4o") == tokens.tiktoken_count(text, "gpt-4o") == 6


# -- the reference's own counts ----------------------------------------------------------------------------

#: Texts that exercise the BPEs' pre-tokenizer (contractions, digits, whitespace runs, scripts, emoji with
#: joiners, combining marks) and the special tokens of both encodings.
REFERENCE_TEXTS = [
    "",
    "hello world",
    "Hello, world! How are you today?",
    "日本語のテキスト",
    "<|endoftext|>",
    "a<|endoftext|>b",
    "<|fim_prefix|><|fim_suffix|><|fim_middle|>",
    "<|endofprompt|> after",
    "  leading and trailing spaces   \n\n\n\ttabs\r\n",
    "1234567890 3.14159 -42 1e10 0xFF",
    "emoji 👍🏽 family 👨\u200d👩\u200d👧\u200d👦 flags 🇯🇵",
    "Ünïcödé çömbïnïng: e\u0301 a\u0308",
    "fn render(ctx) {\n    let out = [];\n    for e in ctx.entries { out.push(e.content); }\n    out\n}\n",
    "'s 're 've 'll 'd 't I'M YOU'RE we'Ve",
    "مرحبا بالعالم नमस्ते दुनिया Привет мир",
    "http://example.com/path?query=1&b=2#frag",
    "The quick brown fox jumps over the lazy dog. " * 50,
    "x" * 1001,
]
#: ``leviath_providers::tokenizer::count_tokens(text, model)`` for each text above, computed once by
#: the reference runtime's own function (its crate, its Cargo.lock: tiktoken-rs 0.12.0) in a small cargo
#: program. ``gpt-5_future`` is cl100k_base there (0.12.0's model table), ``o1`` is not an OpenAI prefix.
REFERENCE_COUNTS = {
    "gpt-4": [0, 2, 9, 8, 1, 3, 3, 2, 10, 18, 31, 20, 27, 18, 29, 15, 501, 126],
    "gpt-3.5-turbo": [0, 2, 9, 8, 1, 3, 3, 2, 10, 18, 31, 20, 27, 18, 29, 15, 501, 126],
    "gpt-4o": [0, 2, 9, 6, 1, 3, 16, 2, 10, 19, 21, 15, 27, 19, 11, 15, 501, 126],
    "gpt-4o-mini": [0, 2, 9, 6, 1, 3, 16, 2, 10, 19, 21, 15, 27, 19, 11, 15, 501, 126],
    "gpt-4.1-mini": [0, 2, 9, 6, 1, 3, 16, 2, 10, 19, 21, 15, 27, 19, 11, 15, 501, 126],
    "gpt-5": [0, 2, 9, 6, 1, 3, 16, 2, 10, 19, 21, 15, 27, 19, 11, 15, 501, 126],
    "o3-mini": [0, 2, 9, 6, 1, 3, 16, 2, 10, 19, 21, 15, 27, 19, 11, 15, 501, 126],
    "o4-mini": [0, 2, 9, 6, 1, 3, 16, 2, 10, 19, 21, 15, 27, 19, 11, 15, 501, 126],
    "gpt-zzz": [0, 2, 9, 8, 1, 3, 3, 2, 10, 18, 31, 20, 27, 18, 29, 15, 501, 126],
    "gpt-5_future": [0, 2, 9, 8, 1, 3, 3, 2, 10, 18, 31, 20, 27, 18, 29, 15, 501, 126],
    "gpt-5.4-mini": [0, 2, 9, 6, 1, 3, 16, 2, 10, 19, 21, 15, 27, 19, 11, 15, 501, 126],
    "o1": [0, 3, 8, 6, 4, 4, 11, 6, 11, 8, 16, 9, 24, 10, 21, 10, 563, 251],
    "claude-3-opus": [0, 4, 10, 7, 4, 5, 12, 6, 12, 10, 18, 10, 28, 11, 24, 12, 643, 286],
    "gemini-2.0-flash": [0, 3, 8, 6, 4, 4, 11, 6, 11, 8, 16, 9, 24, 10, 21, 10, 563, 251],
    "llama-3": [0, 3, 8, 6, 4, 4, 11, 6, 11, 8, 16, 9, 24, 10, 21, 10, 563, 251],
}


@pytest.mark.parametrize("model", sorted(REFERENCE_COUNTS))
def test_counts_equal_the_reference_runtimes(model: str) -> None:
    assert [count_by_model(text, model) for text in REFERENCE_TEXTS] == REFERENCE_COUNTS[model]


def test_the_openai_hint_counts_as_the_references_gpt_4() -> None:
    """The reference maps the ``openai`` hint to ``gpt-4``."""
    assert [count_tokens_heuristic(text, "openai") for text in REFERENCE_TEXTS] == REFERENCE_COUNTS["gpt-4"]


def test_a_lone_surrogate_counts_as_the_replacement_character() -> None:
    """A Python ``str`` can hold one (a JSON ``\\ud800``); the count is a number, never an encoding error."""
    assert tokens.tiktoken_count("a\ud800b") == tokens.tiktoken_count("a\ufffdb")
    assert count_by_model("\udc00", "gpt-4o") == count_by_model("\ufffd", "gpt-4o")
