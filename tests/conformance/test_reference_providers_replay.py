"""Every provider case of ``providers/cases.json`` run through rhaipool against a local recording server and
compared with what the reference runtime did for it (``providers/reference.json``, recorded by the oracle):
the HTTP requests the server received (method, path, the script's headers, body bytes) and the normalised
answers or classified errors.  Cases on the reference's own example script run only in the oracle itself.

``DELIBERATE`` cases differ on purpose (``docs/differences.md``) and must still differ; ``OPEN`` cases are
differences owned by another part of the code base, expected to close (strict xfail).
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from provider_oracle import (
    Recorder,
    closed_url,
    load_cases,
    provider_config,
    run_case,
    script_http,
    script_path,
    start_server,
    substitute,
)

if TYPE_CHECKING:
    from region_pool import Pooled

REFERENCE: dict[str, Any] = json.loads(
    (Path(__file__).parent / "providers" / "reference.json").read_text("utf-8")
)
CASES = {c["name"]: c for c in load_cases() if not c["script"].startswith("@leviath/")}

_USAGE = "token usage read the seed's way (fresh prompt tokens, derived total)"
#: Case -> the entry of docs/differences.md that explains it.
DELIBERATE = {
    **dict.fromkeys(
        [
            "seed_groq_text",
            "seed_groq_tools",
            "seed_groq_extra",
            "echo_usage_full",
            "echo_usage_no_total",
            "echo_usage_negative",
            "echo_usage_small_total",
            "echo_usage_cached_over_prompt",
            "echo_usage_huge",  # its body's float also has the open `e+19` spelling (below)
            "stream_collapsed",
        ],
        _USAGE,
    ),
    "seed_groq_temperature_07": "temperature is not widened to f32",
    "hostfns_all": "decode_base64, a refused redirect explained, transport error text, empty POST Content-Length",
    "throw_rate_limited": "a script's rate_limited retry_after is honoured",
    "throw_failure_kind": "failure_kind labels",
    "fail_ops": "sandbox limits name the limit",
    "fail_string_cap": "sandbox limits name the limit",
    "fail_fn_ptr": "wording of an unconvertible value",
    "stream_fnptr_then_more": "wording of an unconvertible value",
    "fail_blob": "parts, and blobs in them",
}
OPEN = {
    "echo_tool_calls_float_args": "to_json writes 1e21 where the reference writes 1e+21",
}


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[Recorder, str, str]]:
    recorder = Recorder()
    httpd = start_server(recorder)
    try:
        yield recorder, f"http://127.0.0.1:{httpd.server_address[1]}", closed_url()
    finally:
        httpd.shutdown()
        httpd.server_close()


def rhaipool_side(pooled: Pooled, server: tuple[Recorder, str, str], raw: dict[str, Any]) -> dict[str, Any]:
    from coordinator.egress import Egress
    from coordinator.providers.config import parse_config
    from coordinator.providers.executor import PoolExecutor
    from coordinator.providers.runtime import ProviderRuntime

    recorder, base, closed = server
    case = substitute(raw, base, closed)
    scratch = Path(tempfile.mkdtemp(prefix="provider-case-"))
    script = script_path(case, scratch)
    assert script is not None
    config = parse_config(provider_config(case["name"], case, script, scratch))

    async def run() -> dict[str, Any]:
        async with Egress() as egress:
            runtime = ProviderRuntime(PoolExecutor(pooled.pool), egress, config)
            return await run_case(runtime, case["name"], case)

    recorder.routes, recorder.log = case.get("routes", {}), []
    result = pooled.run(run())
    text = json.dumps({"result": result, "http": script_http(recorder.log)}, ensure_ascii=False)
    doc: dict[str, Any] = json.loads(text.replace(base, "${BASE}").replace(closed, "${CLOSED}"))
    return doc


def strict(value: Any) -> Any:
    """A form where ``1``, ``1.0`` and ``True`` stay different under ``==``."""
    if isinstance(value, dict):
        return {k: strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict(v) for v in value]
    return (type(value).__name__, value)


def test_every_listed_case_exists() -> None:
    assert set(DELIBERATE) | set(OPEN) <= set(CASES)


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=OPEN[n])) if n in OPEN else n
        for n in sorted(CASES)
    ],
)
def test_provider_case_matches_the_reference(
    pooled: Pooled, server: tuple[Recorder, str, str], name: str
) -> None:
    ours = strict(rhaipool_side(pooled, server, CASES[name]))
    reference = strict(REFERENCE[name])
    if name in DELIBERATE:
        assert ours != reference, f"{name} now matches the reference: update docs/differences.md"
    else:
        assert ours == reference


def test_an_integer_beyond_i64_in_a_request_reaches_the_script_as_the_reference_float(
    pooled: Pooled, server: tuple[Recorder, str, str]
) -> None:
    """``echo_usage_huge`` past its deliberate difference (the derived total) and the open exponent spelling:
    the script gets the u64 as a FLOAT (docs/scripts/host-functions.md#values-between-json-and-rhai), writes
    it back in the body, and reads it as no integer."""
    ours = rhaipool_side(pooled, server, CASES["echo_usage_huge"])
    reference = REFERENCE["echo_usage_huge"]
    assert [h["body"] for h in ours["http"]] == [
        h["body"].replace("1.8446744073709552e+19", "1.8446744073709552e19") for h in reference["http"]
    ]
    usage, expected = (r["result"]["0:inference"]["ok"]["tokens_used"] for r in (ours, reference))
    assert strict(usage["prompt_tokens"]) == strict(expected["prompt_tokens"]) == ("int", 0)
    assert strict(usage["completion_tokens"]) == strict(expected["completion_tokens"])
