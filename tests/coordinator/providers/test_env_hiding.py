"""``env_var`` from a real script: the new credential shapes come back as ``()`` (issue 10 point 7)."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.providers.runtime import ProviderRuntime

from .harness import Harness

REQ: dict[str, Any] = {"model": "m1", "messages": [{"role": "user", "content": "hi"}]}


def test_a_script_sees_unit_for_credential_shaped_variables(
    harness: Harness, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RP_TEST_DB_PASS", "hunter2")
    monkeypatch.setenv("RP_TEST_BROKER_URL", "amqp://guest:s3cret@rabbit:5672/")
    monkeypatch.setenv("RP_TEST_DOCS_URL", "https://docs.example.com/")
    harness.write(
        "p",
        "fn initialize(config) { config }\n"
        "fn inference(state, request) {\n"
        '  let seen = [env_var("RP_TEST_DB_PASS"), env_var("RP_TEST_BROKER_URL"),'
        ' env_var("RP_TEST_DOCS_URL")];\n'
        '  let out = ""; for v in seen { out += if v == () { "()|" } else { v + "|" }; }\n'
        "  #{content: out}\n"
        "}\n",
    )

    async def body(rt: ProviderRuntime) -> str:
        return (await rt.inference("p", REQ)).content

    assert harness.run(body) == "()|()|https://docs.example.com/|"
