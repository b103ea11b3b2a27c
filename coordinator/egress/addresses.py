"""Which IPv4 addresses an IPv6 address reaches, so a private IPv4 cannot hide inside an IPv6 form.

Python's ``is_global`` judges an IPv6 address by its own prefix: ``::ffff:0:127.0.0.1``,
``2002:7f00:1::`` or ``64:ff9b::a9fe:a9fe`` all look "global" although a translator or a tunnel
delivers them to loopback, a private network or the metadata service. The egress policy therefore
judges every address by each IPv4 address it may reach as well as by itself:

==========================  ==============================  ===============================
form                        prefix                          IPv4 address reached
==========================  ==============================  ===============================
IPv4-mapped                 ``::ffff:0:0/96``               the low 32 bits
IPv4-translated (SIIT)      ``::ffff:0:0:0/96``             the low 32 bits
IPv4-compatible (obsolete)  ``::/96`` (not ``::``, ``::1``)  the low 32 bits
6to4                        ``2002::/16``                   bits 16-47
NAT64, well-known prefix    ``64:ff9b::/96``                the low 32 bits
NAT64, local-use prefix     ``64:ff9b:1::/48``              every RFC 6052 position (/48, /56, /64, /96)
==========================  ==============================  ===============================

The local-use NAT64 prefix may be cut at any RFC 6052 length by the network that runs it, so all
the positions are candidates and every one must pass. Deprecated site-local ``fec0::/10`` (RFC 3879)
is never global: some networks still route it internally.
"""

from __future__ import annotations

import ipaddress

__all__ = ["IPAddress", "is_site_local", "reached_ipv4"]

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_MAPPED = ipaddress.ip_network("::ffff:0:0/96")
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")
_COMPATIBLE = ipaddress.ip_network("::/96")
_SIX_TO_FOUR = ipaddress.ip_network("2002::/16")
_NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")
_NAT64_LOCAL = ipaddress.ip_network("64:ff9b:1::/48")
_SITE_LOCAL = ipaddress.ip_network("fec0::/10")

#: RFC 6052 §2.2: for each prefix length, the IPv4 octets' bit offsets in the 128-bit address
#: (bits 64-71, the "u" octet, are always skipped).
_RFC6052_OCTETS: tuple[tuple[int, int, int, int], ...] = (
    (48, 56, 72, 80),  # /48
    (56, 72, 80, 88),  # /56
    (72, 80, 88, 96),  # /64
    (96, 104, 112, 120),  # /96
)


def _low32(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address:
    return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)


def _octets_at(ip: ipaddress.IPv6Address, offsets: tuple[int, int, int, int]) -> ipaddress.IPv4Address:
    value = int(ip)
    octets = bytes((value >> (120 - offset)) & 0xFF for offset in offsets)
    return ipaddress.IPv4Address(octets)


def reached_ipv4(ip: IPAddress) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses ``ip`` may be delivered to (empty when it embeds none); see the table."""
    if isinstance(ip, ipaddress.IPv4Address):
        return ()
    if ip in _MAPPED or ip in _TRANSLATED or ip in _NAT64_WELL_KNOWN:
        return (_low32(ip),)
    if ip in _COMPATIBLE:
        return () if int(ip) <= 1 else (_low32(ip),)  # ``::`` and ``::1`` are themselves
    if ip in _SIX_TO_FOUR:
        assert ip.sixtofour is not None
        return (ip.sixtofour,)
    if ip in _NAT64_LOCAL:
        return tuple(_octets_at(ip, offsets) for offsets in _RFC6052_OCTETS)
    return ()


def is_site_local(ip: IPAddress) -> bool:
    """Deprecated IPv6 site-local (``fec0::/10``), which ``is_global`` still calls global."""
    return isinstance(ip, ipaddress.IPv6Address) and ip in _SITE_LOCAL
