"""``env_var`` in single-tenant mode hides more credential shapes (issue 10 point 7)."""

from __future__ import annotations

import logging

import pytest

from coordinator.egress import EnvResolver

ENVIRON = {
    "DB_PASS": "hunter2",
    "SMTP_PWD": "x",
    "PWD": "/home/me",
    "SERVICE_CREDS": "x",
    "STRIPE_SK": "sk_live",
    "TLS_PEM": "-----BEGIN",
    "SLACK_WEBHOOK": "https://hooks.slack.com/x",
    "AZURE_STORAGE_CONNECTION_STRING": "x",
    "SQL_CONNECTION_STRING": "x",
    "BROKER_URL": "amqp://guest:guest@rabbit:5672/",
    "CACHE_URI": "redis://:s3cret@cache:6379/0",
    "PLAIN_DSN_URL": "user:pw@db.internal:5432",
    "HOME": "/home/me",
    "DOCS_URL": "https://docs.example.com/a:b",
    "MIRROR_URL": "https://user@mirror.example.com/",
    "PROXY_PORT_URL": "http://proxy.example.com:8080/path",
    "GREETING": "user:password@ is only a string here",
}


@pytest.mark.parametrize(
    "name",
    [
        "DB_PASS",
        "SMTP_PWD",
        "PWD",
        "SERVICE_CREDS",
        "STRIPE_SK",
        "TLS_PEM",
        "SLACK_WEBHOOK",
        "AZURE_STORAGE_CONNECTION_STRING",
        "SQL_CONNECTION_STRING",
        "BROKER_URL",
        "CACHE_URI",
        "PLAIN_DSN_URL",
    ],
)
def test_single_tenant_mode_hides_the_new_shapes(name: str, caplog: pytest.LogCaptureFixture) -> None:
    env = EnvResolver.build("p", environ=ENVIRON)
    with caplog.at_level(logging.WARNING, logger="coordinator.egress.env"):
        assert env.get(name) is None
    assert "hidden" in caplog.text  # the script author is told why


@pytest.mark.parametrize("name", ["HOME", "DOCS_URL", "MIRROR_URL", "PROXY_PORT_URL", "GREETING"])
def test_harmless_values_stay_visible(name: str) -> None:
    assert EnvResolver.build("p", environ=ENVIRON).get(name) == ENVIRON[name]


def test_the_allow_list_still_opens_them() -> None:
    env = EnvResolver.build("p", allow=("broker_url", "DB_PASS"), environ=ENVIRON)
    assert env.get("BROKER_URL") == ENVIRON["BROKER_URL"] and env.get("DB_PASS") == "hunter2"
    assert env.get("CACHE_URI") is None


def test_configured_values_are_the_operators_choice() -> None:
    env = EnvResolver.build("p", configured=(("CACHE_URI", "redis://:pw@x/0"),), environ=ENVIRON)
    assert env.get("CACHE_URI") == "redis://:pw@x/0"


def test_tenant_mode_sees_only_its_allow_list() -> None:
    env = EnvResolver.build("p", allow=("HOME",), tenant_mode=True, environ=ENVIRON)
    assert env.get("HOME") == "/home/me" and env.get("GREETING") is None
