"""Classification of thrown values (docs/scripts/errors.md#provider-error-classes; PB6, PB10, PB11, PB12,
PB19) on plain values."""

from __future__ import annotations

import pytest

from coordinator.providers.failures import (
    FAILURE_KINDS,
    ApiError,
    InvalidResponse,
    RateLimitExceeded,
    RequestFailed,
    Unavailable,
    UnclassifiedProviderError,
    classify_thrown,
    error_from_dict,
)


def test_pb6_transient_throw() -> None:
    err = classify_thrown({"message": "upstream down", "transient": True})
    assert type(err) is RequestFailed and err.message == "upstream down" and err.transient


@pytest.mark.parametrize(
    ("kind", "cls", "transient"),
    [
        ("rate_limited", RateLimitExceeded, True),
        ("transport", RequestFailed, True),
        ("server", RequestFailed, True),
        ("api", ApiError, False),
        ("invalid_response", InvalidResponse, False),
        ("weird", UnclassifiedProviderError, False),
    ],
)
def test_pb10_kind_mapping(kind: str, cls: type, transient: bool) -> None:
    err = classify_thrown({"kind": kind, "message": "m"})
    assert type(err) is cls
    assert err.transient is transient


def test_pb10_transient_only_and_defaults() -> None:
    err = classify_thrown({"transient": True})
    assert type(err) is RequestFailed and err.message == "provider script error"
    assert classify_thrown({"kind": "", "message": ""}).message == "provider script error"
    assert type(classify_thrown({"kind": "weird", "transient": True})) is RequestFailed
    assert classify_thrown({"kind": "rate_limited"}).capacity


def test_pb11_api_classification() -> None:
    err = classify_thrown({"kind": "api", "message": "HTTP 402 Payment Required: ..."})
    assert type(err) is Unavailable and err.reason == "credits-exhausted" and not err.transient
    assert classify_thrown({"kind": "api", "message": "HTTP 401: bad key"}).reason == "auth-failed"
    assert classify_thrown({"kind": "api", "message": "HTTP 403 Forbidden"}).reason == "forbidden"
    plain = classify_thrown({"kind": "api", "message": "HTTP 400: unknown field `foo`"})
    assert type(plain) is ApiError and plain.reason is None and not plain.transient
    for phrase in (
        "Your credit balance is too low",
        "insufficient_quota",
        "You exceeded your current quota",
        "BILLING issue",
        "insufficient credits",
        "requires more credits",
    ):
        assert type(classify_thrown({"kind": "api", "message": phrase})) is Unavailable


@pytest.mark.parametrize(
    "text",
    [
        "HTTP 503 Service Unavailable",
        "overloaded_error",
        "HTTP 529",
        "Too Many Requests",
        "HTTP 400: max 500 tokens",
        "bad gateway",
        "Gateway Timeout",
        "rate limit hit",
    ],
)
def test_api_transient_substrings(text: str) -> None:
    err = classify_thrown({"kind": "api", "message": text})
    assert type(err) is ApiError and err.transient


def test_api_capacity_texts_use_capacity_schedule() -> None:
    assert classify_thrown({"kind": "api", "message": "HTTP 529 overloaded"}).capacity
    assert not classify_thrown({"kind": "api", "message": "HTTP 500 Internal Server Error"}).capacity


@pytest.mark.parametrize(
    ("value", "text"), [("oops", "oops"), (42, "42"), (None, ""), (True, "true"), ([1, 2], "[1, 2]")]
)
def test_pb12_plain_throw_is_other(value: object, text: str) -> None:
    err = classify_thrown(value)
    assert type(err) is UnclassifiedProviderError and err.message == text and not err.transient


def test_pb19_failure_kind() -> None:
    err = classify_thrown(
        {"kind": "transport", "failure_kind": "connection-refused", "message": "could not reach my box"}
    )
    assert type(err) is RequestFailed
    assert err.message.startswith("[connection-refused] could not reach my box - ")
    assert "check the provider is running" in err.message
    credits = classify_thrown(
        {"kind": "api", "failure_kind": "server-error", "message": "HTTP 402 out of credits"}
    )
    assert type(credits) is Unavailable and credits.reason == "credits-exhausted"
    assert credits.message.startswith("[server-error] HTTP 402 out of credits - ")
    unknown = classify_thrown({"kind": "transport", "failure_kind": "quantum-decoherence", "message": "m"})
    assert unknown.message == "m"
    bracketed = classify_thrown({"failure_kind": "timeout", "message": "[x] already labelled"})
    assert bracketed.message == "[x] already labelled"


def test_ten_labels_each_with_own_remedy() -> None:
    assert len(FAILURE_KINDS) == 10
    assert len(set(FAILURE_KINDS.values())) == 10
    for label in FAILURE_KINDS:
        msg = classify_thrown({"failure_kind": label, "message": "m"}).message
        assert msg == f"[{label}] m - {FAILURE_KINDS[label]}"


def test_error_dict_round_trip() -> None:
    err = classify_thrown({"kind": "api", "message": "HTTP 500 x"})
    back = error_from_dict(err.to_dict())
    assert (type(back), back.message, back.transient) == (ApiError, "HTTP 500 x", True)
