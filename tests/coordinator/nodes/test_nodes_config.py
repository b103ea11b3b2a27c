"""The ``[nodes]`` table: what a coordinator accepts at start-up, and the one-line reason when it does not."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from coordinator.nodes import generate
from coordinator.nodes.config import parse_nodes_config, parse_tcp_endpoint
from coordinator.nodes.errors import NodesConfigError


@pytest.fixture
def base(tmp_path: Path) -> Path:
    generate(tmp_path / "keys", "coordinator")
    (tmp_path / "nodes").mkdir()
    return tmp_path


def table(listen: str = "tcp://0.0.0.0:8766", secret: str = "keys/coordinator.key_secret") -> str:
    return f'[nodes]\nlisten = "{listen}"\nsecret_key = "{secret}"\nauthorized_keys = "nodes"\n'


def test_a_complete_table_with_relative_paths_taken_from_the_config_folder(base: Path) -> None:
    config = parse_nodes_config(tomllib.loads(table()), base)
    assert config is not None
    assert (config.host, config.port, config.listen) == ("0.0.0.0", 8766, "tcp://0.0.0.0:8766")
    assert config.secret_key == base / "keys" / "coordinator.key_secret"
    assert config.authorized_keys == base / "nodes"


def test_no_table_means_no_remote_nodes(base: Path) -> None:
    assert parse_nodes_config({"serve": {}}, base) is None


@pytest.mark.parametrize(
    ("text", "where"),
    [
        (table(listen="0.0.0.0:8766"), "[nodes] listen"),
        (table(listen="tcp://host:0"), "[nodes] listen"),
        (table(listen="tcp://host:70000"), "[nodes] listen"),
        (table(listen="ipc:///tmp/x"), "[nodes] listen"),
        (table(secret="keys/coordinator.key"), "[nodes] secret_key"),
        (table(secret="keys/missing.key_secret"), "[nodes] secret_key"),
        (table() + 'authorised_keys = "typo"\n', "[nodes]"),
        ('nodes = "tcp://x:1"\n', "[nodes]"),
    ],
)
def test_a_wrong_table_fails_naming_the_key(base: Path, text: str, where: str) -> None:
    with pytest.raises(NodesConfigError) as caught:
        parse_nodes_config(tomllib.loads(text), base)
    assert caught.value.where == where
    assert str(caught.value).startswith(where)


def test_missing_authorized_directory_fails_at_start_not_at_every_handshake(base: Path) -> None:
    (base / "nodes").rmdir()
    with pytest.raises(NodesConfigError, match=r"^\[nodes\] authorized_keys: .* is not a directory"):
        parse_nodes_config(tomllib.loads(table()), base)
    assert parse_nodes_config(tomllib.loads(table()), base, check_files=False) is not None


@pytest.mark.parametrize(
    ("endpoint", "expected"),
    [
        ("tcp://coordinator.example:8766", ("coordinator.example", 8766)),
        ("tcp://10.0.0.5:1", ("10.0.0.5", 1)),
        ("tcp://[::1]:65535", ("::1", 65535)),
        ("tcp://*:8766", ("*", 8766)),
    ],
)
def test_join_endpoints(endpoint: str, expected: tuple[str, int]) -> None:
    assert parse_tcp_endpoint(endpoint, "--join") == expected
