"""The HTTP/1.1 layer under the routes (uvicorn's httptools protocol, ``protocol.py``): a request head
is bounded while it arrives, keep-alive and pipelined requests are answered in order."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import httpx
from service_support import TOKENS, ServiceProcess, free_port, write_config

_ENDLESS = 64 << 20  # far beyond any socket buffer: the service must stop reading long before this


def _connect(service: ServiceProcess) -> socket.socket:
    return socket.create_connection(("127.0.0.1", service.port), timeout=30)


def _read_responses(sock: socket.socket, count: int) -> list[tuple[int, bytes]]:
    """``count`` responses (status, body) off one connection (they carry a Content-Length)."""
    buffer = b""
    out: list[tuple[int, bytes]] = []
    while len(out) < count:
        while b"\r\n\r\n" not in buffer:
            buffer += sock.recv(65536)
        head, _, buffer = buffer.partition(b"\r\n\r\n")
        lines = head.split(b"\r\n")
        length = next(
            int(v) for k, _, v in (ln.partition(b":") for ln in lines) if k.lower() == b"content-length"
        )
        while len(buffer) < length:
            buffer += sock.recv(65536)
        out.append((int(lines[0].split()[1]), buffer[:length]))
        buffer = buffer[length:]
    return out


def test_a_head_that_never_ends_is_cut_off_not_buffered(service: ServiceProcess) -> None:
    reply, sent, piece = b"", 0, b"y" * 65536
    with _connect(service) as sock:
        sock.sendall(b"GET /api/scripts HTTP/1.1\r\nHost: x\r\nX-Endless: ")
        try:
            while sent < _ENDLESS:
                sock.sendall(piece)
                sent += len(piece)
                if select.select([sock], [], [], 0)[0]:
                    reply = sock.recv(65536)
                    break
        except OSError:  # reset or broken pipe: the service closed the connection
            pass
    assert sent < _ENDLESS
    assert reply == b"" or reply.startswith(b"HTTP/1.1 431"), reply[:200]
    assert httpx.get(service.url + "/healthz", timeout=30).status_code == 200


def test_a_head_under_the_limit_is_served(service: ServiceProcess) -> None:
    headers = {"Authorization": f"Bearer {TOKENS['acme']}", "X-Pad": "p" * (12 << 10)}
    assert httpx.get(service.url + "/api/scripts", headers=headers, timeout=30).status_code == 200


def test_pipelined_requests_on_one_connection_are_answered_in_order(service: ServiceProcess) -> None:
    body = json.dumps({"kind": "region_hook", "content": 'fn render(ctx) { "ok" }'}).encode()
    validate = (
        b"POST /api/scripts/validate HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (TOKENS["acme"].encode(), len(body), body)
    )
    health = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"
    with _connect(service) as sock:
        sock.sendall(validate + health + validate)
        answers = _read_responses(sock, 3)
        sock.sendall(health)  # and the connection is still alive afterwards
        answers += _read_responses(sock, 1)
    assert [status for status, _ in answers] == [200, 200, 200, 200]
    assert json.loads(answers[0][1])["valid"] is True and json.loads(answers[2][1])["valid"] is True


def _self_signed(folder: Path) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )  # fmt: skip
    return cert, key


def test_tls_from_the_config(tmp_path: Path) -> None:
    cert, key = _self_signed(tmp_path)
    port = free_port()
    config = write_config(tmp_path, port=port, extra=f'tls_cert = "{cert}"\ntls_key = "{key}"', workers=1)
    process = subprocess.Popen(
        [sys.executable, "-m", "coordinator", "serve", "--config", str(config)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=tmp_path,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    trusted = ssl.create_default_context(cafile=str(cert))
    url = f"https://127.0.0.1:{port}"
    try:
        deadline, ready = time.monotonic() + 60, False
        while not ready and time.monotonic() < deadline and process.poll() is None:
            try:
                ready = httpx.get(url + "/readyz", verify=trusted, timeout=1).status_code == 200
            except httpx.TransportError:
                time.sleep(0.05)
        assert ready, "the TLS service did not become ready"
        headers = {"Authorization": f"Bearer {TOKENS['acme']}"}
        with httpx.Client(base_url=url, verify=trusted, headers=headers, timeout=30) as client:
            for _ in range(3):  # keep-alive over TLS
                assert client.get("/api/scripts").status_code == 200
        with socket.create_connection(("127.0.0.1", port), timeout=10) as plain:
            plain.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            try:
                answer = plain.recv(100)
            except OSError:  # reset: the handshake failed
                answer = b""
            assert not answer.startswith(b"HTTP/1.1 200")  # no plain HTTP on a TLS port
    finally:
        process.send_signal(signal.SIGTERM)
        assert process.wait(60) == 0
