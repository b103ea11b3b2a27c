"""Egress policy on plain values, and env_var resolution (docs/scripts/host-functions.md#env_varname; PE3)."""

from __future__ import annotations

import pytest

from coordinator.egress import EgressDenied, EgressPolicy, EnvResolver, is_credential_shaped


def test_hosts_from_base_urls_and_config() -> None:
    p = EgressPolicy.build(
        "p", urls=("https://API.groq.com/openai/v1", None), allowed_hosts=("extra.example",)
    )
    assert p.check_url("https://api.groq.com/x") == "api.groq.com"
    assert p.check_url("http://extra.example:8080/y") == "extra.example"
    with pytest.raises(EgressDenied, match="not allowed"):
        p.check_url("https://evil.example/")
    assert (
        EgressPolicy.build("p", allowed_hosts=("*",)).check_url("https://anything.example/")
        == "anything.example"
    )
    with pytest.raises(EgressDenied):
        EgressPolicy.build("p").check_url("https://api.groq.com/")


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1",
        "10.1.2.3",
        "172.16.0.1",
        "192.168.1.1",
        "169.254.169.254",
        "100.100.100.200",
        "100.64.0.1",
        "0.0.0.0",
        "::1",
        "fe80::1",
        "fd00:ec2::254",
        "::ffff:127.0.0.1",
        "64:ff9b::a00:1",
        "224.0.0.1",
        "fc00::1",
    ],
)
def test_non_public_addresses_refused(address: str) -> None:
    p = EgressPolicy.build("p", allowed_hosts=("*",))
    assert not p.address_allowed("h", address)
    with pytest.raises(EgressDenied, match="egress_allow"):
        p.check_address("h", address)


def test_public_addresses_allowed_and_egress_allow_forms() -> None:
    p = EgressPolicy.build("p", allowed_hosts=("*",))
    assert p.address_allowed("h", "8.8.8.8") and p.address_allowed("h", "2606:4700::1111")
    cidr = EgressPolicy.build("p", egress_allow=("10.0.0.0/8", "::1", "internal.lan"))
    assert cidr.address_allowed("x", "10.9.9.9")
    assert not cidr.address_allowed("x", "192.168.0.1")
    assert cidr.address_allowed("x", "::1")
    assert cidr.address_allowed("internal.lan", "192.168.0.1")  # allowed by host name
    assert cidr.check_url("http://internal.lan/") == "internal.lan"
    assert cidr.check_url("http://[::1]:8000/") == "::1"
    assert EgressPolicy.build("p", egress_allow=("127.0.0.1",)).address_allowed("x", "::ffff:127.0.0.1")


def test_pe3_env_allowlist() -> None:
    environ = {"PROVIDER_TEST_REGION": "val", "ANTHROPIC_API_KEY": "sk", "MY_PROVIDER_KEY": "mine"}
    env = EnvResolver.build("p", environ=environ)
    assert env.get("PROVIDER_TEST_REGION") == "val"
    assert env.get("UNSET_VARIABLE_X") is None
    assert env.get("ANTHROPIC_API_KEY") is None
    allowed = EnvResolver.build("p", allow=("my_provider_key",), environ=environ)
    assert allowed.get("MY_PROVIDER_KEY") == "mine"
    assert allowed.get("ANTHROPIC_API_KEY") is None
    assert env.get(5) is None


def test_env_tenant_mode_sees_only_configured() -> None:
    environ = {"PATH_LIKE": "host", "SHARED": "host"}
    env = EnvResolver.build(
        "p",
        configured=(("GROQ_API_KEY", "from-config"),),
        allow=("SHARED",),
        tenant_mode=True,
        environ=environ,
    )
    assert env.get("GROQ_API_KEY") == "from-config"
    assert env.get("PATH_LIKE") is None
    assert env.get("SHARED") == "host"
    single = EnvResolver.build("p", configured=(("GROQ_API_KEY", "cfg"),), environ=environ)
    assert single.get("GROQ_API_KEY") == "cfg" and single.get("PATH_LIKE") == "host"


@pytest.mark.parametrize(
    ("name", "shaped"),
    [
        ("GROQ_API_KEY", True),
        ("github_token", True),
        ("MY_PAT", True),
        ("DATABASE_URL", True),
        ("AWS_REGION", True),
        ("LEVIATH_HOME", True),
        ("SSH_AUTH_SOCK", True),
        ("HOME", False),
        ("LANG", False),
        ("MONKEY", True),
        ("REGION", False),
    ],
)
def test_credential_shapes(name: str, shaped: bool) -> None:
    assert is_credential_shaped(name) is shaped
