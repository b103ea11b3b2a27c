"""IPv4 addresses hidden in IPv6 forms are judged by the address they reach (issue 10 point 7)."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from coordinator.egress import Egress, EgressDenied, EgressPolicy, HostError
from coordinator.egress.addresses import reached_ipv4

OPEN = EgressPolicy.build("p", allowed_hosts=("*",))

# every IPv6 form of an IPv4 address the policy knows, built from the IPv4 address's 32 bits
FORMS = {
    "mapped": lambda v4: f"::ffff:{v4}",
    "translated": lambda v4: f"::ffff:0:{v4}",
    "compatible": lambda v4: f"::{v4}",
    "6to4": lambda v4: str(
        ipaddress.IPv6Address((0x2002 << 112) | (int(ipaddress.IPv4Address(v4)) << 80) | 1)
    ),
    "nat64": lambda v4: f"64:ff9b::{v4}",
    "nat64-local-96": lambda v4: f"64:ff9b:1::{v4}",
    "nat64-local-48": lambda v4: _rfc6052_48(v4),
}


def _rfc6052_48(v4: str) -> str:
    """``64:ff9b:1::/48`` with the IPv4 address at the /48 positions (bits 48-63 and 72-87)."""
    bits = int(ipaddress.IPv4Address(v4))
    high, low = bits >> 16, bits & 0xFFFF
    prefix = int(ipaddress.IPv6Address("64:ff9b:1::"))
    return str(ipaddress.IPv6Address(prefix | (high << 64) | (low << 40)))


INSIDE = ["127.0.0.1", "10.1.2.3", "192.168.0.10", "169.254.169.254", "100.64.0.1", "0.0.0.0", "224.0.0.1"]


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("v4", INSIDE)
def test_an_inside_ipv4_address_in_any_ipv6_form_is_refused(form: str, v4: str) -> None:
    address = FORMS[form](v4)
    if address != "::0.0.0.0":  # that one is ``::`` itself, refused as unspecified
        assert ipaddress.IPv4Address(v4) in reached_ipv4(ipaddress.ip_address(address))
    assert not OPEN.address_allowed("example.com", address), address
    with pytest.raises(EgressDenied):
        OPEN.check_address("example.com", address)


@pytest.mark.parametrize("form", ["mapped", "translated", "compatible", "6to4", "nat64"])
def test_a_public_ipv4_address_in_an_ipv6_form_is_judged_by_that_address(form: str) -> None:
    assert OPEN.address_allowed("example.com", FORMS[form]("8.8.8.8"))


@pytest.mark.parametrize("address", ["fec0::1", "fec0:1:2:3::4", "feff::1"])
def test_deprecated_site_local_is_refused(address: str) -> None:
    assert not OPEN.address_allowed("example.com", address)


@pytest.mark.parametrize("address", ["2606:4700::1111", "8.8.8.8", "2001:4860:4860::8888"])
def test_global_addresses_still_pass(address: str) -> None:
    assert OPEN.address_allowed("example.com", address)


def test_loopback_and_unspecified_ipv6_are_themselves() -> None:
    assert reached_ipv4(ipaddress.ip_address("::1")) == ()
    assert not OPEN.address_allowed("example.com", "::1")
    assert not OPEN.address_allowed("example.com", "::")


def test_egress_allow_of_the_ipv4_range_covers_its_ipv6_forms_only() -> None:
    policy = EgressPolicy.build("p", allowed_hosts=("*",), egress_allow=("127.0.0.0/8",))
    assert policy.address_allowed("example.com", "::ffff:127.0.0.1")
    assert policy.address_allowed("example.com", "2002:7f00:1::1")
    assert not policy.address_allowed("example.com", "2002:a00:1::1")  # 10.0.0.1 is not listed
    assert not policy.address_allowed("example.com", "64:ff9b::a9fe:a9fe")  # the metadata address


def test_metadata_through_nat64_is_refused_even_when_its_range_is_allowed() -> None:
    policy = EgressPolicy.build("p", allowed_hosts=("*",), egress_allow=("100.64.0.0/10",))
    assert policy.address_allowed("example.com", "64:ff9b::6440:1")  # 100.64.0.1, listed
    assert not policy.address_allowed("example.com", "64:ff9b::a9fe:a9fe")


@pytest.mark.parametrize(
    "host", ["[::ffff:0:7f00:1]", "[2002:7f00:1::1]", "[64:ff9b::a9fe:a9fe]", "[::a00:1]", "[fec0::1]"]
)
def test_the_client_refuses_them_before_connecting(host: str) -> None:
    """Through the real client: refused at connect time with the policy's message."""

    async def scenario() -> HostError:
        async with Egress() as egress:
            with pytest.raises(HostError) as info:
                await egress.fetch(OPEN, "GET", f"http://{host}:9/", timeout=5)
            assert egress.budgets.in_flight()["requests"] == 0
            return info.value

    error = asyncio.run(scenario())
    assert "egress refused" in error.value["message"] and "egress_allow" in error.value["message"]
