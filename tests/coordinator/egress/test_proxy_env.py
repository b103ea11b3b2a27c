"""``env_var`` in single-user mode hides a ``*PROXY`` variable that carries ``user:password@``
(issue 21 point 8); the value is read from the real process environment, as a script's call is."""

from __future__ import annotations

import pytest

from coordinator.egress import EnvResolver


@pytest.mark.parametrize(
    ("name", "value", "shown"),
    [
        ("HTTPS_PROXY", "http://user:pw@proxy.example:3128", False),
        ("https_proxy", "http://user:pw@proxy.example:3128", False),
        ("ALL_PROXY", "socks5://u:p@10.0.0.1:1080", False),
        ("Http_Proxy", "user:secret@proxy:8080", False),
        ("NO_PROXY", "admin:x@internal", False),
        ("FTP_PROXY", "http://:pw@proxy", False),
        ("HTTPS_PROXY", "http://proxy.example:3128", True),
        ("HTTPS_PROXY", "http://user@proxy.example:3128", True),
        ("NO_PROXY", "localhost,127.0.0.1", True),
        ("PROXY_MODE", "u:p@x", True),  # does not end in PROXY
    ],
)
def test_proxy_variables_with_a_password_are_hidden(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, shown: bool
) -> None:
    monkeypatch.setenv(name, value)
    resolver = EnvResolver.build("p")
    assert resolver.get(name) == (value if shown else None)


def test_an_allow_listed_proxy_variable_is_shown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://user:pw@proxy.example:3128")
    assert (
        EnvResolver.build("p", allow=("https_proxy",)).get("HTTPS_PROXY")
        == "http://user:pw@proxy.example:3128"
    )
