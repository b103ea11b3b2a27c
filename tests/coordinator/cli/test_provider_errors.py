"""Provider failures that explain themselves, against a real HTTP server on 127.0.0.1 (issue 14, point 1)."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from coordinator._cli.main import main
from coordinator.bench.standin import Reply, StandinServer

GROQ = (Path(__file__).resolve().parents[3] / "examples" / "providers" / "groq.rhai").read_text()


@pytest.fixture
def server() -> Iterator[StandinServer]:
    with StandinServer() as srv:
        yield srv


def _setup(tmp_path: Path, base_url: str) -> list[str]:
    (tmp_path / "groq.rhai").write_text(GROQ)
    (tmp_path / "c.toml").write_text(
        f'providers_dir = "."\n[model_providers.groq]\napi_key = "k"\nbase_url = "{base_url}"\n'
        'egress_allow = ["127.0.0.1"]\n[limits]\ninference_retry_base_ms = 10\n'
    )
    (tmp_path / "req.json").write_text(
        json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    )
    return [
        "infer",
        "--provider",
        "groq",
        "--request",
        str(tmp_path / "req.json"),
        "--config",
        str(tmp_path / "c.toml"),
    ]


def _run(*args: str) -> Any:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def test_401_names_its_label_status_server_message_and_remedy(tmp_path: Path, server: StandinServer) -> None:
    server.route("POST", "/v1/chat", lambda r: Reply.json({"error": {"message": "Invalid API Key"}}, 401))
    base = _setup(tmp_path, server.base_url)
    result = _run(*base)
    assert result.exit_code == 1
    assert "[auth-failed] HTTP 401: Invalid API Key" in result.stderr
    assert "remedy: the provider refused the API key" in result.stderr
    error = json.loads(_run(*base, "--json").stdout)["error"]
    assert (error["class"], error["status"], error["server_message"], error["attempts"]) == (
        "Unavailable",
        401,
        "Invalid API Key",
        1,
    )


def test_429_waits_what_retry_after_says_and_shows_each_retry(tmp_path: Path, server: StandinServer) -> None:
    body = b'{"error": {"message": "slow down please"}}'
    server.route("POST", "/v1/chat", lambda r: Reply(429, {"Retry-After": "1"}, body))
    result = _run(*_setup(tmp_path, server.base_url), "--retries", "2", "--json")
    assert result.exit_code == 1
    retries = [line for line in result.stderr.splitlines() if line.startswith("attempt ")]
    assert retries == [
        "attempt 1/3 failed (rate-limited: HTTP 429); retrying in 1.0 s",
        "attempt 2/3 failed (rate-limited: HTTP 429); retrying in 1.0 s",
    ]
    error = json.loads(result.stdout)["error"]
    assert error["attempts"] == 3 and error["server_message"] == "slow down please"
    assert len([r for r in server.requests if r.path.startswith("/v1/chat")]) == 3
    quiet = _run(*_setup(tmp_path, server.base_url), "--retries", "1", "-q")
    assert "attempt " not in quiet.stderr and "HTTP 429: slow down please" in quiet.stderr


def test_server_down_is_plain_words(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    result = _run(*_setup(tmp_path, f"http://127.0.0.1:{port}/v1"), "--retries", "0")
    assert result.exit_code == 1
    assert f"[connection-refused] connection refused by 127.0.0.1:{port}" in result.stderr
    assert "Errno" not in result.stderr


def test_a_stream_with_no_chunk_and_no_finish_is_an_error(tmp_path: Path, server: StandinServer) -> None:
    server.route("POST", "/v1/chat", lambda r: Reply(200, {"Content-Type": "text/html"}, b"<html>hi</html>"))
    base = _setup(tmp_path, server.base_url)
    result = _run(*base, "--stream", "--json")
    assert result.exit_code == 1
    assert json.loads(result.stdout.strip().splitlines()[-1])["error"]["class"] == "InvalidResponse"
    assert "no chunk and no finish reason" in _run(*base, "--stream").stderr


def test_provider_compile_error_has_its_place_once(tmp_path: Path, server: StandinServer) -> None:
    base = _setup(tmp_path, server.base_url)
    (tmp_path / "groq.rhai").write_text(
        "fn initialize(c) { #{} }\nfn inference(s, r) { let x = 1 let y = 2; }\n"
    )
    result = _run(*base)
    assert result.exit_code == 1
    path = tmp_path / "groq.rhai"
    assert result.stderr.count(f"{path}:2:") == 1 and "groq: groq:" not in result.stderr
    error = json.loads(_run(*base, "--json").stdout)["error"]
    assert (error["file"], error["line"]) == (str(path), 2)


def test_limit_inside_a_provider_names_the_limit_and_its_value(tmp_path: Path, server: StandinServer) -> None:
    base = _setup(tmp_path, server.base_url)
    (tmp_path / "groq.rhai").write_text("fn initialize(c) { #{} }\nfn inference(s, r) { loop { } }\n")
    error = json.loads(_run(*base, "--json").stdout)["error"]
    assert (error["limit"], error["limit_value"]) == ("operations", 500_000)
    assert "(limit: operations = 500000)" in _run(*base).stderr
