"""``infer --server URL`` presents a provider failure as the local ``infer`` does (issue 14).

A real ``rhaipool serve`` process, a real local HTTP server answering 401, and a closed port: the
remote command prints the same label, HTTP status, server message and remedy as the local one, in
the same ``{"error": {"class", "message", ...}}`` shape.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from service_support import TOKENS, ServiceProcess, free_port, write_config

from coordinator._cli.main import main

REPO = Path(__file__).resolve().parents[3]
REQUEST = REPO / "examples" / "providers" / "request.json"
GROQ = REPO / "examples" / "providers" / "groq.rhai"


class _Refuses(BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        body = json.dumps({"error": {"message": "Invalid API Key", "type": "invalid_request_error"}}).encode()
        self.send_response(401)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def api() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Refuses)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def _config(folder: Path, base_url: str) -> Path:
    folder.mkdir()
    (folder / "providers").mkdir()
    (folder / "providers" / "groq.rhai").write_text(GROQ.read_text())
    extra = 'providers_dir = "providers"\n[limits]\ninference_retry_attempts = 1\n'
    config = write_config(folder, port=free_port(), standin=base_url, extra="")
    config.write_text(extra + config.read_text())
    return config


def _infer(*args: str) -> Result:
    """``rhaipool infer`` in this process (click's runner): exit code, stdout and stderr as written."""
    command = ["infer", "--provider", "groq", "--request", str(REQUEST), *args]
    env = {"RHAIPOOL_TOKEN": TOKENS["acme"], "RHAIPOOL_SERVER": None, "RHAIPOOL_ADMIN_TOKEN": None}
    return CliRunner().invoke(main, command, env=env, catch_exceptions=False)


@contextmanager
def _serving(config: Path) -> Iterator[ServiceProcess]:
    """``rhaipool serve`` on ``config`` with the groq script stored for acme."""
    port = int(config.read_text().split('listen = "127.0.0.1:')[1].split('"')[0])
    service = ServiceProcess.start(config, port)
    try:
        with service.client() as client:
            client.put_script("provider", "groq", GROQ.read_text())
        yield service
    finally:
        assert service.stop() == 0


@pytest.fixture(scope="module")
def refusing(api: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, ServiceProcess]]:
    """One service for the module's tests against the API answering 401, and its config."""
    config = _config(tmp_path_factory.mktemp("refusing") / "svc", api)
    with _serving(config) as service:
        yield config, service


def _local_and_remote(config: Path, service: ServiceProcess, *flags: str) -> tuple[Result, Result]:
    return _infer("--config", str(config), *flags), _infer("--server", service.url, *flags)


SHOWN = ("class", "failure_kind", "status", "server_message", "remedy", "transient")


def test_a_401_reads_the_same_remote_and_local(refusing: tuple[Path, ServiceProcess]) -> None:
    local, remote = _local_and_remote(*refusing, "--json")
    assert local.exit_code == remote.exit_code == 1, (local.stdout, remote.stdout)
    mine, theirs = json.loads(local.stdout)["error"], json.loads(remote.stdout)["error"]
    assert {k: mine.get(k) for k in SHOWN} == {k: theirs.get(k) for k in SHOWN}
    assert theirs["failure_kind"] == "auth-failed" and theirs["status"] == 401
    assert theirs["server_message"] == "Invalid API Key"


def test_the_text_form_names_label_status_message_and_remedy(refusing: tuple[Path, ServiceProcess]) -> None:
    local, remote = _local_and_remote(*refusing)
    assert remote.exit_code == 1
    first = remote.stderr.strip().splitlines()[0]
    # the local line also names the place in the script file; the service keeps the script itself
    assert first == local.stderr.strip().splitlines()[0].split(" at /")[0]
    assert "[auth-failed] HTTP 401: Invalid API Key" in first
    assert "remedy: the provider refused the API key" in remote.stderr


def test_a_refused_connection_is_plain_words_remotely_too(tmp_path: Path) -> None:
    closed = f"http://127.0.0.1:{free_port()}/v1"
    config = _config(tmp_path / "svc", closed)
    with _serving(config) as service:
        local, remote = _local_and_remote(config, service, "--json")
    theirs = json.loads(remote.stdout)["error"]
    assert theirs["class"] == json.loads(local.stdout)["error"]["class"] == "RequestFailed"
    assert theirs["failure_kind"] == "connection-refused"
    assert "Errno" not in theirs["message"] and "connection refused by 127.0.0.1" in theirs["message"]
    assert theirs["remedy"]
