"""Egress under the operator's policy, and the tenant-mode host rule (issue 21 point 2).

Real workers run the scripts; the upstream is the stand-in API on 127.0.0.1, also reached as
``localhost`` (another host name for the same server).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from coordinator.egress import EgressConfigError, parse_operator_egress
from coordinator.providers.failures import ProviderError
from coordinator.providers.runtime import ProviderRuntime

from .harness import Harness

#: initialize returns the base_url it was given, or one it makes up; inference GETs ``<url>/echo``.
INVENTS = """
fn initialize(config) { #{ base_url: config.invented ?? config.base_url } }
fn inference(state, request) {
    let target = request.messages[request.messages.len() - 1].content;
    let url = if target == "state" { state.base_url } else { target };
    #{ content: http_get(`${url}/echo`, #{}) }
}
"""


def ask(text: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


def localhost(harness: Harness) -> str:
    return "http://localhost:" + harness.server.url.rsplit(":", 1)[1]


@pytest.mark.parametrize("tenants", [True, False], ids=["tenants", "library"])
def test_a_base_url_initialize_invents_is_reached_only_in_library_mode(
    harness: Harness, tenants: bool
) -> None:
    """The table names 127.0.0.1; initialize returns ``localhost`` (whose address egress_allow admits)."""
    harness.data["tenants"] = tenants
    harness.table("p", base_url=harness.server.url, invented=localhost(harness))
    harness.write("p", INVENTS)

    async def body(rt: ProviderRuntime) -> tuple[str | None, str]:
        refused = None
        try:
            await rt.inference("p", ask("state"), tenant="acme")
        except ProviderError as exc:
            refused = exc.message
        own = (await rt.inference("p", ask(harness.server.url), tenant="acme")).content
        return refused, own

    refused, own = harness.run(body)
    assert '"path": "/echo"' in own  # the table's own host is reached in both modes
    if tenants:
        assert refused is not None and "host 'localhost' is not allowed" in refused
    else:
        assert refused is None


@pytest.mark.parametrize(
    ("policy", "reached", "refused", "why"),
    [
        ({"denied_hosts": ["local*"]}, "127", "localhost", "denied_hosts"),
        ({"allowed_hosts": ["127.0.0.?"]}, "127", "localhost", "allowed_hosts"),
        ({"allowed_hosts": ["*"], "denied_hosts": ["127.*"]}, "localhost", "127", "denied_hosts"),
        ({"allowed_ports": [443]}, None, "127", "allowed_ports"),
    ],
)
def test_operator_patterns_apply_on_top_of_the_provider_rule(
    harness: Harness, policy: dict[str, Any], reached: str | None, refused: str, why: str
) -> None:
    urls = {"127": harness.server.url, "localhost": localhost(harness)}
    harness.data["tenants"] = True
    harness.table("p", base_url=harness.server.url, allowed_hosts=["localhost"])
    harness.write("p", INVENTS)
    operator = parse_operator_egress(policy)

    async def body(rt: ProviderRuntime) -> tuple[str | None, str, int]:
        rt.set_config(replace(rt.config, operator_egress=operator))
        sent = len(harness.server.requests)
        content = None
        if reached is not None:
            content = (await rt.inference("p", ask(urls[reached]), tenant="acme")).content
        with pytest.raises(ProviderError) as info:
            await rt.inference("p", ask(urls[refused]), tenant="acme")
        return content, info.value.message, len(harness.server.requests) - sent

    content, message, sent = harness.run(body)
    assert sent == (0 if reached is None else 1)  # the refused request never left
    assert reached is None or '"path": "/echo"' in (content or "")
    assert "egress refused" in message and why in message and "[serve.egress]" in message


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"alowed_hosts": ["a"]}, "did you mean 'allowed_hosts'"),
        ({"allowed_hosts": "a.com"}, "allowed_hosts must be an array"),
        ({"denied_hosts": ["http://x.com/"]}, "is not a host pattern"),
        ({"allowed_ports": [0]}, "allowed_ports must be an array of ports"),
        ({"allowed_ports": [True]}, "allowed_ports must be an array of ports"),
    ],
)
def test_a_bad_serve_egress_table_is_refused_naming_the_key(raw: dict[str, Any], message: str) -> None:
    with pytest.raises(EgressConfigError, match=message):
        parse_operator_egress(raw)


def test_globs_match_subdomains_not_the_bare_domain() -> None:
    operator = parse_operator_egress({"allowed_hosts": ["*.Example.com."], "allowed_ports": [443, 8443]})
    operator.check("p", "https", "api.example.com", None)
    operator.check("p", "https", "a.b.example.com", 8443)
    for host, port in (("example.com", None), ("example.com.evil.net", None), ("api.example.com", 80)):
        with pytest.raises(Exception, match="egress refused"):
            operator.check("p", "https", host, port)
