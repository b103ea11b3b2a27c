"""Verdicts egress works out once and reuses (IP-literal hosts, charsets) stay exact per policy and value."""

from __future__ import annotations

import pytest
from yarl import URL

from coordinator.egress.body import charset_of
from coordinator.egress.connect import check_literal
from coordinator.egress.policy import EgressDenied, EgressPolicy

LOOPBACK_URL = "http://127.0.0.1:8080/v1/models"


def _policy(*allow: str) -> EgressPolicy:
    return EgressPolicy.build("p", urls=(LOOPBACK_URL,), egress_allow=allow)


def test_an_allowed_literal_stays_allowed_and_another_policy_still_refuses_it() -> None:
    allowing, refusing = _policy("127.0.0.1"), _policy()
    for _ in range(3):
        check_literal(allowing, URL(LOOPBACK_URL), LOOPBACK_URL)
        with pytest.raises(EgressDenied, match=r"resolves to 127\.0\.0\.1"):
            check_literal(refusing, URL(LOOPBACK_URL), LOOPBACK_URL)
    assert refusing.allowed_literals == set()
    assert _policy("127.0.0.1") == allowing  # what it remembered is not part of the policy's value


def test_remembered_literals_are_bounded() -> None:
    policy = _policy("127.0.0.0/8")
    for n in range(2000):
        url = f"http://127.0.0.{n % 250 + 1}:8080/v1/{n}"
        check_literal(policy, URL(url), url)
    assert 0 < len(policy.allowed_literals) <= 256


class _Answer:
    def __init__(self, content_type: str) -> None:
        self.headers = {"content-type": content_type}


@pytest.mark.parametrize(
    ("content_type", "charset"),
    [
        ("application/json", "utf-8"),
        ("text/plain; charset=ISO-8859-1", "iso-8859-1"),
        ('text/plain; charset="latin-1"', "latin-1"),
        ("text/plain; charset=no-such-codec", "utf-8"),
        ("application/json", "utf-8"),
    ],
)
def test_the_charset_follows_each_header_value(content_type: str, charset: str) -> None:
    assert charset_of(_Answer(content_type)) == charset  # type: ignore[arg-type]
