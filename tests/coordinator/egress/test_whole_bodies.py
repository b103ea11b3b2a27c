"""A body that arrived whole with its headers is taken without reads: same caps, budgets and errors."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from coordinator.egress import Egress, EgressPolicy, HostError
from coordinator.egress.budgets import EgressLimits

CAPPED = EgressPolicy.build("capped", egress_allow=("127.0.0.1",), max_response_bytes=1000)


def _until_close(body: bytes) -> bytes:
    """An answer with no Content-Length: the body ends where the server closes the connection."""
    return b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nConnection: close\r\n\r\n" + body


def _chunked(body: bytes) -> bytes:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"
    return head + b"%x\r\n" % len(body) + body + b"\r\n0\r\n\r\n"


async def _fetch(port: int, limits: EgressLimits | None = None) -> tuple[str, int]:
    """The text, and the response bytes egress still holds afterwards."""
    async with Egress(limits=limits) as egress:
        text = await egress.fetch(CAPPED, "GET", f"http://127.0.0.1:{port}/")
        return text, egress.budgets.responses.used


def _error(port: int, limits: EgressLimits | None = None) -> HostError:
    with pytest.raises(HostError) as info:
        asyncio.run(_fetch(port, limits))
    return info.value


@pytest.mark.parametrize("frame", [_until_close, _chunked])
def test_the_size_cap_holds_for_an_undeclared_length(raw_server: Any, frame: Any) -> None:
    assert asyncio.run(_fetch(raw_server(frame(b"x" * 1000)))) == ("x" * 1000, 0)
    err = _error(raw_server(frame(b"x" * 1001)))
    assert err.value["kind"] == "api"
    assert err.value["message"].startswith("response too large")


@pytest.mark.parametrize("frame", [_until_close, _chunked])
def test_an_undeclared_length_still_counts_against_the_response_budget(raw_server: Any, frame: Any) -> None:
    """600 bytes can never fit a 500-byte budget: refused at once, as when read piece by piece."""
    limits = EgressLimits(response_bytes=500, tenant_response_bytes=None)
    assert asyncio.run(_fetch(raw_server(frame(b"y" * 200)), limits)) == ("y" * 200, 0)
    err = _error(raw_server(frame(b"y" * 600)), limits)
    assert err.value["kind"] == "transport" and err.value["transient"] is True
    assert "response_bytes" in err.value["message"]


def test_a_declared_length_that_arrived_whole(raw_server: Any) -> None:
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/plain; charset=latin-1\r\nContent-Length: 3\r\n\r\n"
    assert asyncio.run(_fetch(raw_server(head + b"\xe9t\xe9"))) == ("été", 0)
