"""One token arithmetic for both sides: the worker's helpers and the coordinator's fallbacks agree."""

from __future__ import annotations

import pytest
import rhai

from coordinator.providers.tokens import count_by_model, family_for
from coordinator.regions.tokens import estimate_tokens
from proto import tokens
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
