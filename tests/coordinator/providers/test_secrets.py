"""Tenant mode: no secret value enters a sandbox (issue 21 point 1).

Real workers run the scripts, a real stand-in API on 127.0.0.1 is the upstream. Each test asserts on
what the script could see (initialize's state, inference's answer, env_var) and on what the upstream
received (the real key, in the header or query string, and only there).
"""

from __future__ import annotations

import base64
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from coordinator.bench.standin import StandinServer
from coordinator.egress import PLACEHOLDER_PREFIX
from coordinator.providers.failures import ProviderError
from coordinator.providers.runtime import ProviderRuntime

from .harness import Harness
from .server import redirect_url

GROQ = (Path(__file__).resolve().parents[3] / "examples" / "providers" / "groq.rhai").read_text()
REQ: dict[str, Any] = {"model": "standin-small", "messages": [{"role": "user", "content": "hi"}]}
KEY = "sk-real-0123456789abcdef"
ENV_KEY = "sk-env-fedcba9876543210"
PLACEHOLDER = re.compile(re.escape(PLACEHOLDER_PREFIX) + "[0-9a-f]{32}")

#: ``inference`` sends one request, described by the caller's last message: ``<where> <url>``.
SENDER = """
fn initialize(config) { #{ key: config.api_key, env: env_var("EXTRA_TOKEN"), url: config.base_url } }
fn inference(state, request) {
    let how = request.messages[request.messages.len() - 1].content.split(" ");
    let where = how[0];
    let url = how[1];
    let text = if where == "header" {
        http_get(url, #{ "Authorization": `Bearer ${state.key}` })
    } else if where == "envheader" {
        http_get(url, #{ "X-Token": state.env })
    } else if where == "basic" {
        http_get(url, #{ "Authorization": "Basic " + encode_base64("user:" + state.key) })
    } else if where == "reflected" {
        let pad = "";
        for i in 0..4090 { pad += "x"; }
        http_get(`${url}?body=${pad}${state.key}`, #{})
    } else if where == "query" {
        http_get(`${url}?key=${state.key}`, #{})
    } else if where == "path" {
        http_get(`${url}/${state.key}`, #{})
    } else if where == "body" {
        http_post(url, to_json(#{ key: state.key }), #{})
    } else if where == "name" {
        let headers = #{};
        headers[state.key] = "x";
        http_get(url, headers)
    } else {
        throw "unknown test case";
    };
    #{ content: text }
}
"""


def ask(text: str) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}]}


def tenant_harness(harness: Harness, **table: Any) -> Harness:
    harness.data["tenants"] = True
    table.setdefault("api_key", KEY)
    table.setdefault("base_url", harness.server.base_url)
    harness.table("p", **table)
    return harness


def received(server: StandinServer, since: int) -> list[Any]:
    return server.requests[since:]


def test_seed_groq_runs_unmodified_and_only_the_upstream_sees_the_key(
    harness: Harness, caplog: pytest.LogCaptureFixture
) -> None:
    """initialize's state holds a placeholder; the upstream gets ``Bearer <real key>``; logs never show it."""
    harness.write("groq", GROQ)
    harness.data["tenants"] = True
    harness.table("groq", api_key=KEY, base_url=harness.server.base_url)
    server = harness.server

    async def body(rt: ProviderRuntime) -> tuple[Any, str, list[str], list[str]]:
        since = len(server.requests)
        provider = await rt.get("groq", tenant="acme")
        answer = await rt.inference("groq", REQ, tenant="acme")
        chunks = [c async for c in rt.stream("groq", REQ, tenant="acme")]
        models = [m.id for m in await rt.list_models(provider)]
        auth = [r.headers.get("authorization", "") for r in received(server, since)]
        assert all(not isinstance(c, ProviderError) for c in chunks), chunks
        return provider.state, answer.content, models, auth

    with caplog.at_level(logging.DEBUG):
        state, content, models, auth = harness.run(body)
    assert PLACEHOLDER.fullmatch(state["api_key"]) and KEY not in repr(state)
    assert content == "echo: hi" and "standin-small" in models
    assert auth and all(a == f"Bearer {KEY}" for a in auth)
    assert KEY not in caplog.text


def test_env_entries_and_env_var_values_are_placeholders_too(harness: Harness) -> None:
    """The table's ``env`` values (what groq.rhai reads when there is no api_key) and a host variable
    the operator allow-listed reach the script as placeholders and the upstream as themselves."""
    harness.write("groq", GROQ)
    harness.write("p", SENDER)
    harness.data["tenants"] = True
    harness.table("groq", base_url=harness.server.base_url, env={"GROQ_API_KEY": ENV_KEY})
    harness.table("p", api_key=KEY, base_url=harness.server.url, env={"EXTRA_TOKEN": ENV_KEY + "x"})
    server = harness.server

    async def body(rt: ProviderRuntime) -> tuple[Any, Any, str, list[str]]:
        since = len(server.requests)
        groq = await rt.get("groq", tenant="acme")
        answer = await rt.inference("groq", REQ, tenant="acme")
        sender = await rt.get("p", tenant="acme")
        echoed = await rt.inference("p", ask(f"envheader {server.url}/echo"), tenant="acme")
        seen = [
            r.headers.get("authorization") or r.headers.get("x-token", "") for r in received(server, since)
        ]
        assert answer.content == "echo: hi"
        return groq.state, sender.state, echoed.content, seen

    groq_state, sender_state, echoed, seen = harness.run(body)
    assert PLACEHOLDER.fullmatch(groq_state["api_key"])
    assert PLACEHOLDER.fullmatch(sender_state["env"]) and PLACEHOLDER.fullmatch(sender_state["key"])
    assert sender_state["url"] == harness.server.url  # not a secret: passed as it is
    assert seen == [f"Bearer {ENV_KEY}", ENV_KEY + "x"]
    # the upstream echoed the real value back: the script got its placeholder in its place
    assert ENV_KEY not in echoed and sender_state["env"] in echoed


def test_header_and_query_reach_the_upstream_with_the_real_value(harness: Harness) -> None:
    tenant_harness(harness, base_url=harness.server.url).write("p", SENDER)
    server = harness.server

    async def body(rt: ProviderRuntime) -> tuple[list[Any], list[str]]:
        since = len(server.requests)
        answers = [
            (await rt.inference("p", ask(f"{where} {server.url}/echo"), tenant="acme")).content
            for where in ("header", "query", "basic")
        ]
        got = received(server, since)
        return [(r.headers.get("authorization"), r.query.get("key")) for r in got], answers

    seen, answers = harness.run(body)
    basic = "Basic " + base64.b64encode(f"user:{KEY}".encode()).decode()
    assert seen == [(f"Bearer {KEY}", None), (None, KEY), (basic, None)]
    assert all(KEY not in a for a in answers)  # /echo shows the header: turned back into the placeholder


@pytest.mark.parametrize(
    ("where", "expected"),
    [
        ("body", "request body"),
        ("path", "URL (outside its query string)"),
        ("name", "header name"),
    ],
)
def test_placeholder_outside_headers_and_query_is_refused(
    harness: Harness, where: str, expected: str
) -> None:
    tenant_harness(harness, base_url=harness.server.url).write("p", SENDER)
    server = harness.server

    async def body(rt: ProviderRuntime) -> tuple[str, int]:
        since = len(server.requests)
        with pytest.raises(ProviderError) as info:
            await rt.inference("p", ask(f"{where} {server.url}/echo"), tenant="acme")
        return info.value.message, len(received(server, since))

    message, sent = harness.run(body)
    assert sent == 0, "nothing may be sent"
    assert "egress refused" in message and expected in message and KEY not in message


def test_placeholder_to_another_host_or_redirected_elsewhere_is_refused(harness: Harness) -> None:
    """``localhost`` is reachable (egress_allow) but not one of the table's hosts: no secret goes there,
    whether asked directly or by a redirect from the provider's own host."""
    port = harness.server.url.rsplit(":", 1)[1]
    other = f"http://localhost:{port}"
    tenant_harness(harness, base_url=harness.server.url, egress_allow=["127.0.0.1", "localhost"])
    harness.write("p", SENDER)
    server = harness.server

    async def refusals(rt: ProviderRuntime) -> tuple[list[str], list[str]]:
        since = len(server.requests)
        messages = []
        for url in (f"{other}/echo", redirect_url(server, f"{other}/echo")):
            with pytest.raises(ProviderError) as info:
                await rt.inference("p", ask(f"header {url}"), tenant="acme")
            messages.append(info.value.message)
        return messages, [r.path for r in received(server, since)]

    messages, paths = harness.run(refusals)
    assert "is not one of the own hosts of provider 'p'" in messages[0]
    assert "redirect to another origin" in messages[1]
    assert paths == ["/redirect"]  # the redirect itself was asked of the provider's host; nothing else
    assert all(KEY not in m for m in messages)


def test_library_mode_keeps_handing_the_values_over(harness: Harness) -> None:
    """Without tenants the script gets its table's values as they are (today's behaviour)."""
    harness.write("p", SENDER)
    harness.table("p", api_key=KEY, base_url=harness.server.url, env={"EXTRA_TOKEN": ENV_KEY})

    async def body(rt: ProviderRuntime) -> Any:
        return (await rt.get("p")).state

    state = harness.run(body)
    assert (state["key"], state["env"]) == (KEY, ENV_KEY)


def test_a_proxy_password_never_reaches_a_single_user_script(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 21 point 8, through a real worker: ``env_var`` answers ``()`` for a proxy with a password."""
    harness.write(
        "p",
        "fn initialize(config) { #{} }\n"
        "fn inference(state, request) {\n"
        '    #{ content: `${env_var("HTTPS_PROXY")}|${env_var("http_proxy")}` }\n'
        "}\n",
    )

    async def body(rt: ProviderRuntime) -> str:
        # set once the workers run (they are spawned with the coordinator's environment)
        monkeypatch.setenv("HTTPS_PROXY", "http://user:hunter2@proxy.example:3128")
        monkeypatch.setenv("http_proxy", "http://proxy.example:3128")
        return (await rt.inference("p", REQ)).content

    assert harness.run(body) == "|http://proxy.example:3128"


def test_a_table_with_too_many_secrets_does_not_load(harness: Harness) -> None:
    from coordinator.providers.loader import ProviderLoadError

    tenant_harness(harness, **{f"token_{i}": f"value-{i}" for i in range(300)}).write("p", SENDER)

    async def body(rt: ProviderRuntime) -> None:
        with pytest.raises(ProviderLoadError, match="more than 256 secret values"):
            await rt.get("p", tenant="acme")

    harness.run(body)


def test_an_error_body_reflecting_the_key_shows_not_even_part_of_it(harness: Harness) -> None:
    """The API answers 401 with the key at the cut-off of an error message (4 096 characters): the
    value is turned back into its placeholder before the message is cut, so no prefix of it shows."""
    tenant_harness(harness, base_url=harness.server.url).write("p", SENDER)
    server = harness.server

    async def body(rt: ProviderRuntime) -> tuple[str, str | None]:
        since = len(server.requests)
        with pytest.raises(ProviderError) as info:
            await rt.inference("p", ask(f"reflected {server.url}/status/401"), tenant="acme")
        return info.value.message, received(server, since)[0].query.get("body")

    message, sent = harness.run(body)
    assert sent is not None and sent.endswith(KEY)  # the upstream did get the key (in the query string)
    assert "HTTP 401" in message and KEY[:6] not in message


def test_a_host_variable_the_operator_allows_is_a_placeholder_in_every_answer(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``allow_env_vars`` (operator-only) lets env_var read a host variable: the script gets its
    placeholder, whether read in initialize or in inference, and whatever it returns carries no secret."""
    harness.data["tenants"] = True
    harness.table("p", base_url=harness.server.url, allow_env_vars=["EXTRA_TOKEN"])
    harness.write(
        "p",
        'fn initialize(config) { #{ env: env_var("EXTRA_TOKEN") } }\n'
        "fn inference(state, request) {\n"
        '    let now = env_var("EXTRA_TOKEN");\n'
        "    let echoed = http_get(`" + harness.server.url + '/echo`, #{ "X-Token": now });\n'
        "    #{ content: `${state.env}|${now}|${echoed}` }\n"
        "}\n",
    )
    server = harness.server

    async def body(rt: ProviderRuntime) -> tuple[str, list[str]]:
        monkeypatch.setenv("EXTRA_TOKEN", ENV_KEY)  # once the workers run: they never see it anyway
        since = len(server.requests)
        content = (await rt.inference("p", REQ, tenant="acme")).content
        return content, [r.headers.get("x-token", "") for r in received(server, since)]

    content, sent = harness.run(body)
    first, second, echoed = content.split("|", 2)
    assert PLACEHOLDER.fullmatch(first) and first == second  # one placeholder per value and load
    assert ENV_KEY not in content and first in echoed
    assert sent == [ENV_KEY]


def test_a_password_in_the_base_url_reaches_neither_the_script_nor_another_request(harness: Harness) -> None:
    """``https://user:PASSWORD@host``: the script's base_url carries a placeholder for the password, and
    a request built on it is refused (a placeholder in the URL's authority), so nothing is sent."""
    with_password = harness.server.url.replace("http://", "http://user:pw-secret-77@")
    tenant_harness(harness, base_url=with_password).write("p", SENDER)
    server = harness.server

    async def body(rt: ProviderRuntime) -> tuple[Any, str, int]:
        state = (await rt.get("p", tenant="acme")).state
        since = len(server.requests)
        with pytest.raises(ProviderError) as info:
            await rt.inference("p", ask(f"header {state['url']}/echo"), tenant="acme")
        return state, info.value.message, len(received(server, since))

    state, message, sent = harness.run(body)
    assert "pw-secret-77" not in repr(state) and state["url"].startswith("http://user:" + PLACEHOLDER_PREFIX)
    assert sent == 0 and "URL (outside its query string)" in message
