"""deploy/systemd: ``systemd-analyze verify`` (any warning fails) and ``systemd-analyze security
--offline`` (exposure score) where systemd-analyze exists, and the settings the README promises, read
from the unit files themselves so they hold everywhere.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from coordinator.nodes.config import parse_nodes_config
from coordinator.service.config import parse_service_config

ROOT = Path(__file__).resolve().parents[2]
UNITS = ROOT / "deploy" / "systemd"
INSTALLED = "/opt/rhaipool/bin/rhaipool"
WORKER_UNITS = ("rhaipool.service", "rhaipool-node.service")  # units whose processes start workers
ALL_UNITS = (*WORKER_UNITS, "rhaipool-node-link.socket", "rhaipool-node-link.service")
MAX_EXPOSURE = 2.5  # systemd-analyze security: 0 (locked down) .. 10 (exposed); "OK" is below 3
ANALYZE = shutil.which("systemd-analyze")


def directives(unit: str) -> dict[str, list[str]]:
    """Every ``Key=value`` of a unit file (all sections), values in order of appearance."""
    found: dict[str, list[str]] = {}
    for line in (UNITS / unit).read_text().splitlines():
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            found.setdefault(key, []).append(value)
    return found


def last(unit: str, key: str) -> str:
    return directives(unit)[key][-1]


@pytest.fixture(scope="module")
def runnable_units(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The units with ExecStart= pointing at this checkout's rhaipool (verify checks the binary exists)."""
    folder = tmp_path_factory.mktemp("units")
    for unit in ALL_UNITS:
        text = (UNITS / unit).read_text().replace(INSTALLED, str(Path(sys.executable).with_name("rhaipool")))
        (folder / unit).write_text(text)
    return folder


def test_units_verify_without_a_single_warning(runnable_units: Path) -> None:
    assert ANALYZE is not None
    done = subprocess.run(
        [ANALYZE, "verify", "--man=no", *(f"./{u}" for u in ALL_UNITS)],
        cwd=runnable_units, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert (done.returncode, done.stderr) == (0, "")


@pytest.mark.parametrize("unit", [u for u in ALL_UNITS if u.endswith(".service")])
def test_exposure_score_is_low(runnable_units: Path, unit: str) -> None:
    assert ANALYZE is not None
    done = subprocess.run(
        [ANALYZE, "security", "--offline=true", "--no-pager", f"./{unit}"],
        cwd=runnable_units, capture_output=True, text=True, check=False,
    )  # fmt: skip
    score = re.search(rf"Overall exposure level for {re.escape(unit)}: (\d+\.\d+)", done.stdout + done.stderr)
    assert score is not None, done.stdout[-2000:] + done.stderr
    assert float(score.group(1)) <= MAX_EXPOSURE


@pytest.mark.parametrize("unit", WORKER_UNITS)
def test_worker_units_are_sandboxed_and_bounded_yet_let_workers_build_their_own_sandbox(unit: str) -> None:
    d = directives(unit)
    expected = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "ProtectHome": "yes",
        "PrivateTmp": "yes",
        "PrivateDevices": "yes",
        "CapabilityBoundingSet": "",
        "User": "rhaipool",
        "SystemCallArchitectures": "native",
    }
    assert {key: d[key][-1] for key in expected} == expected
    for limit in ("MemoryMax", "CPUQuota", "TasksMax"):
        assert d[limit][-1], f"{unit}: {limit}= is empty"
    # the worker sandbox unshares these, then mounts, pivots, loads Landlock and seccomp rules
    assert set(last(unit, "RestrictNamespaces").split()) == {"user", "net", "mnt"}
    allowed = set(last(unit, "SystemCallFilter").split())
    assert {
        "@system-service",
        "@mount",
        "seccomp",
        "landlock_create_ruleset",
        "landlock_restrict_self",
    } <= allowed
    assert "ExecStart" in d and d["ExecStart"][0].startswith(f"{INSTALLED} ")


def test_node_has_no_network_but_a_link_to_the_coordinator() -> None:
    node, socket, link = "rhaipool-node.service", "rhaipool-node-link.socket", "rhaipool-node-link.service"
    assert last(node, "PrivateNetwork") == "yes" and last(socket, "PrivateNetwork") == "yes"
    assert last(node, "JoinsNamespaceOf") == socket and last(socket, "JoinsNamespaceOf") == node
    assert "PrivateNetwork" not in directives(link), "the forwarder is the one piece on the host network"
    assert last(link, "IPAddressDeny") == "any"
    assert last(link, "ExecStart").split()[1] == "${RHAIPOOL_COORDINATOR}"
    command = last(node, "ExecStart").split()
    assert command[1] == "node"
    option = dict(zip(command[2::2], command[3::2], strict=True))
    assert set(option) == {"--join", "--secret-key", "--server-key", "--workers"}
    assert option["--join"] == f"tcp://{last(socket, 'ListenStream')}"
    credentials = {c.split(":")[0] for c in directives(node)["LoadCredential"]}
    assert option["--secret-key"] == "%d/node.key_secret" and option["--server-key"] == "%d/coordinator.key"
    assert credentials == {"node.key_secret", "coordinator.key"}
    env = dict(line.split("=", 1) for line in (UNITS / "node.env").read_text().splitlines() if "=" in line)
    assert set(env) == {"RHAIPOOL_COORDINATOR", "RHAIPOOL_NODE_WORKERS"}
    assert env["RHAIPOOL_NODE_WORKERS"].isdigit()


def test_coordinator_config_reads_its_key_from_the_unit_credential() -> None:
    data = tomllib.loads((UNITS / "rhaipool.toml").read_text())
    serve = parse_service_config(data, base=Path("/etc/rhaipool"))
    assert serve.database.parent == Path("/var/lib") / last("rhaipool.service", "StateDirectory")
    (credential,) = directives("rhaipool.service")["LoadCredential"]
    name = credential.split(":")[0]
    nodes = parse_nodes_config(data, base=Path("/etc/rhaipool"), check_files=False)
    assert nodes is not None
    assert nodes.secret_key == Path("/run/credentials/rhaipool.service") / name
    assert "--config /etc/rhaipool/rhaipool.toml" in last("rhaipool.service", "ExecStart")
    assert data["serve"]["local_workers"] == 0


def test_sysusers_file_creates_the_unprivileged_user_the_units_run_as(tmp_path: Path) -> None:
    (tmp_path / "etc").mkdir()
    done = subprocess.run(
        ["systemd-sysusers", f"--root={tmp_path}", str(UNITS / "rhaipool.sysusers")],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    users = {
        line.split(":")[0]: line.split(":") for line in (tmp_path / "etc" / "passwd").read_text().splitlines()
    }
    user = users[last("rhaipool.service", "User")]
    assert last("rhaipool-node.service", "User") == user[0]
    assert int(user[2]) != 0 and user[5] == "/var/lib/rhaipool" and user[6].endswith("nologin")
