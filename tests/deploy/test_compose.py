"""deploy/compose.yaml: parsed as YAML (no Docker engine here) and checked against what the services
need; its one-shot key job runs here for real, twice, to show it makes the right files and is idempotent.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import yaml

from coordinator.nodes.config import parse_nodes_config
from coordinator.service.config import parse_service_config

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "deploy" / "compose.yaml"
NODES = ("node-1", "node-2")
LONG_RUNNING = ("rhaipool", *NODES)


def compose() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load(COMPOSE.read_text())
    return data


def unescape(text: str) -> str:
    """Compose interpolation of a string with no variables: ``$$`` stands for ``$``."""
    assert "${" not in text.replace("$${", "")
    return text.replace("$$", "$")


def service_config() -> dict[str, Any]:
    return tomllib.loads(unescape(compose()["configs"]["rhaipool.toml"]["content"]))


def mounts(service: str) -> dict[str, tuple[str, bool]]:
    """volume → (mount path, read-only) for one service."""
    found = {}
    for spec in compose()["services"][service].get("volumes", []):
        volume, path, *mode = spec.split(":")
        found[volume] = (path, mode == ["ro"])
    return found


def test_service_and_two_nodes_built_from_the_dockerfile() -> None:
    data = compose()
    assert set(data["services"]) == {"keys", *LONG_RUNNING}
    build = data["services"]["keys"]["build"]
    context = (COMPOSE.parent / build["context"]).resolve()
    assert context == ROOT and (context / build["dockerfile"]).is_file()
    images = {s["image"] for s in data["services"].values()}
    assert images == {"rhaipool:0.1.0"}, "every container runs the image the keys job builds"


def test_containers_are_hardened() -> None:
    services = compose()["services"]
    for name in LONG_RUNNING:
        s = services[name]
        assert s["user"] == "10001:10001" and s["read_only"] is True, name
        assert s["cap_drop"] == ["ALL"] and "cap_add" not in s, name
        assert "no-new-privileges:true" in s["security_opt"], name
        assert any(t.startswith("/tmp:") for t in s["tmpfs"]), name
        assert s["mem_limit"] and s["pids_limit"] and s["cpus"], name
        assert "privileged" not in s and "network_mode" not in s, name
    keys = services["keys"]
    assert keys["network_mode"] == "none" and keys["cap_add"] == ["CHOWN"] and keys["cap_drop"] == ["ALL"]


def test_nodes_reach_only_the_coordinator() -> None:
    data = compose()
    assert data["networks"]["nodes"] == {"internal": True}
    for node in NODES:
        assert data["services"][node]["networks"] == ["nodes"]
    coordinator = data["services"]["rhaipool"]
    assert sorted(coordinator["networks"]) == ["nodes", "public"]
    assert all(port.startswith("127.0.0.1:") for port in coordinator["ports"])


def test_nodes_join_with_their_own_key_and_nobody_sees_another_secret() -> None:
    nodes_port = service_config()["nodes"]["listen"].rsplit(":", 1)[1]
    for node in NODES:
        command = compose()["services"][node]["command"]
        assert command[0] == "node"
        option = dict(zip(command[1::2], command[2::2], strict=True))
        assert set(option) == {"--join", "--secret-key", "--server-key", "--workers"}
        assert option["--join"] == f"tcp://rhaipool:{nodes_port}"
        path, read_only = mounts(node)[f"{node}-keys"]
        assert read_only and set(mounts(node)) == {f"{node}-keys"}
        assert option["--secret-key"] == f"{path}/{node}.key_secret"
        assert option["--server-key"] == f"{path}/coordinator.key"
    users = {
        volume: [s for s in compose()["services"] if volume in mounts(s)] for volume in compose()["volumes"]
    }
    assert users == {
        "coordinator-keys": ["keys", "rhaipool"],
        "node-1-keys": ["keys", "node-1"],
        "node-2-keys": ["keys", "node-2"],
        "data": ["rhaipool"],
    }


def test_service_config_is_read_by_the_service_and_points_into_its_mounts() -> None:
    data = service_config()
    serve = parse_service_config(data, base=Path("/etc/rhaipool"))
    assert f"127.0.0.1:{serve.port}:{serve.port}" in compose()["services"]["rhaipool"]["ports"]
    assert data["serve"]["local_workers"] == 0
    keys_path, read_only = mounts("rhaipool")["coordinator-keys"]
    assert read_only
    nodes = parse_nodes_config(data, base=Path("/etc/rhaipool"), check_files=False)
    assert nodes is not None and nodes.host == "0.0.0.0"
    assert nodes.secret_key == Path(keys_path) / "coordinator.key_secret"
    assert nodes.authorized_keys == Path(keys_path) / "nodes"
    data_path, read_only = mounts("rhaipool")["data"]
    assert serve.database.parent == Path(data_path) and not read_only


def run_key_job(root: Path) -> None:
    script = unescape(compose()["services"]["keys"]["command"][0]).replace("/keys/", f"{root}/")
    script = script.replace("chown -R 10001:10001", f"chown -R {os.getuid()}:{os.getgid()}")
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    done = subprocess.run(["sh", "-c", script], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr


def test_key_job_writes_each_volume_what_its_container_needs_and_is_idempotent(tmp_path: Path) -> None:
    for volume in ("coordinator", *NODES):
        (tmp_path / volume).mkdir()  # the job's mount points
    run_key_job(tmp_path)
    layout = {str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file()}
    assert layout == {
        "coordinator/coordinator.key",
        "coordinator/coordinator.key_secret",
        "coordinator/nodes/node-1.key",
        "coordinator/nodes/node-2.key",
        "node-1/node-1.key",
        "node-1/node-1.key_secret",
        "node-1/coordinator.key",
        "node-2/node-2.key",
        "node-2/node-2.key_secret",
        "node-2/coordinator.key",
    }
    for node in NODES:
        assert (tmp_path / "coordinator/nodes" / f"{node}.key").read_text() == (
            tmp_path / node / f"{node}.key"
        ).read_text()
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    run_key_job(tmp_path)
    assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before
    for volume in ("coordinator", *NODES):
        assert (tmp_path / volume).stat().st_mode & 0o777 == 0o700
