"""``rhaipool serve`` with ``[serve] local_workers = 0`` and a ``[nodes]`` table:
every call runs on a node, and a node key dies when it is revoked or deleted."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))

from node_cluster import REPO, Keys, NodeProcess, make_keys
from service_support import ADMIN, ServiceProcess, free_port, sha

from coordinator.service.config import ServiceConfigError, load_service_config, parse_service_config

TOKEN = "acme-secret-token"


def config_text(keys: Keys, http_port: int, node_port: int, local_workers: int = 0) -> str:
    return "\n".join([
        "[serve]",
        f'listen = "127.0.0.1:{http_port}"',
        'database = "state/rhaipool.db"',
        f"local_workers = {local_workers}",
        "grace_secs = 3",
        f'admin_token_sha256 = "{sha(ADMIN)}"',
        "[tenants.acme]",
        f'token_sha256 = "{sha(TOKEN)}"',
        "[nodes]",
        f'listen = "tcp://127.0.0.1:{node_port}"',
        f'secret_key = "{keys.coordinator_secret}"',
        f'authorized_keys = "{keys.authorized}"',
    ])  # fmt: skip


def test_the_service_with_no_local_worker_runs_calls_on_a_node(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys")
    http_port, node_port = free_port(), free_port()
    config = tmp_path / "serve.toml"
    config.write_text(config_text(keys, http_port, node_port) + "\n")
    node = NodeProcess(f"tcp://127.0.0.1:{node_port}", keys, "n1", workers=1)  # joins once the service is up
    try:
        service = ServiceProcess.start(config, http_port)  # ready = a worker is ACTIVE: the node's
        try:
            with service.client(token=TOKEN) as client:
                assert client.validate("region_hook", "fn render(ctx) { ctx }") == {"valid": True}
            assert {p.pid for p in service.children()} == set()  # no local worker process at all
        finally:
            assert service.stop() == 0
    finally:
        node.close()


HEARTBEAT = 0.5
"""The service's default node heartbeat ([nodes] heartbeat)."""
SLACK = 1.5
"""A loaded, shared machine: scheduling, and the status poll over HTTP."""


def _workers(service: ServiceProcess) -> int:
    with service.client(token=ADMIN) as admin:
        return sum(w["state"] == "active" for w in admin.status()["workers"])


def _until(what: str, done: Callable[[], bool], timeout: float = 30.0) -> float:
    """Poll ``done``; the seconds it took."""
    begun = time.monotonic()
    while not done():
        assert time.monotonic() - begun < timeout, f"not within {timeout} s: {what}"
        time.sleep(0.05)
    return time.monotonic() - begun


def test_the_service_drops_and_refuses_a_revoked_and_a_deleted_node_key(tmp_path: Path) -> None:
    """A running ``rhaipool serve`` that admitted n1 and n2: ``rhaipool keys revoke`` (a rename into
    revoked/) drops n1 within a heartbeat and n1 restarted is refused; deleting n2's key file (what a
    Kubernetes Secret update does) drops n2 too. No restart of the service."""
    keys = make_keys(tmp_path / "keys")
    http_port, node_port = free_port(), free_port()
    config = tmp_path / "serve.toml"
    config.write_text(config_text(keys, http_port, node_port) + "\n")
    join = f"tcp://127.0.0.1:{node_port}"
    nodes = {name: NodeProcess(join, keys, name, workers=1) for name in ("n1", "n2")}
    try:
        service = ServiceProcess.start(config, http_port)
        try:
            _until("both nodes joined", lambda: _workers(service) == 2)
            revoke = [sys.executable, "-m", "coordinator", "keys", "revoke", str(keys.authorized), "n1"]
            subprocess.run(revoke, cwd=REPO, check=True, capture_output=True, timeout=60)
            assert _until("n1 dropped", lambda: _workers(service) == 1) < HEARTBEAT + SLACK
            assert "node n1 dropped" in service.log()
            nodes["n1"].close()
            nodes["n1"] = NodeProcess(join, keys, "n1", workers=1)  # a fresh handshake with the revoked key
            _until("n1 refused", lambda: "refused node key" in service.log())
            time.sleep(2.0)
            assert _workers(service) == 1 and nodes["n1"].process.poll() is None
            (keys.authorized / "n2.key").unlink()
            assert _until("n2 dropped", lambda: _workers(service) == 0) < HEARTBEAT + SLACK
            assert "node n2 dropped" in service.log() and service.process.poll() is None
        finally:
            assert service.stop() == 0
    finally:
        for node in nodes.values():
            node.close()


def parse(text: str, base: Path) -> object:
    import tomllib

    return parse_service_config(tomllib.loads(text), base)


def test_local_workers_and_nodes_are_read_and_checked(tmp_path: Path) -> None:
    keys = make_keys(tmp_path / "keys")
    config = parse(config_text(keys, 8000, 9000, local_workers=3), tmp_path)
    assert config.local_workers == 3  # type: ignore[attr-defined]
    assert config.nodes is not None and config.nodes.port == 9000  # type: ignore[attr-defined]
    with pytest.raises(ServiceConfigError, match="local_workers = 0 needs a \\[nodes\\] table"):
        parse("[serve]\nlocal_workers = 0\n", tmp_path)
    with pytest.raises(ServiceConfigError, match="local_workers must be a whole number"):
        parse("[serve]\nlocal_workers = -1\n", tmp_path)
    with pytest.raises(ServiceConfigError, match="give one"):
        parse("[serve]\nlocal_workers = 1\nworkers = 2\n", tmp_path)
    missing = tmp_path / "missing.toml"
    missing.write_text(config_text(keys, 8000, 9000).replace(str(keys.coordinator_secret), "/nonexistent"))
    parse(missing.read_text(), tmp_path)  # the shape is right: files are checked when the service starts
    with pytest.raises(ServiceConfigError, match="secret_key"):
        load_service_config(missing)


def test_node_heartbeat_and_liveness_are_configurable(tmp_path: Path) -> None:
    from coordinator.nodes.link import NodeListener

    keys = make_keys(tmp_path / "keys")
    text = config_text(keys, 8000, 9000)
    config = parse(text + "\nheartbeat = 0.2\nliveness = 1.0\n", tmp_path)
    settings = NodeListener.from_config(config.nodes).settings  # type: ignore[attr-defined]
    assert (settings.heartbeat, settings.liveness) == (0.2, 1.0)
    defaults = NodeListener.from_config(parse(text, tmp_path).nodes).settings  # type: ignore[attr-defined]
    assert (defaults.heartbeat, defaults.liveness) == (0.5, 2.5)  # expired within 3 s
    with pytest.raises(ServiceConfigError, match="liveness"):
        parse(text + "\nheartbeat = 1\nliveness = 1\n", tmp_path)
    with pytest.raises(ServiceConfigError, match="heartbeat"):
        parse(text + "\nheartbeat = 0\n", tmp_path)
