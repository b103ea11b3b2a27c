"""``rhaipool keys generate|list|revoke`` (public names): the installed command once, then in-process."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
import zmq.auth
from click.testing import CliRunner, Result

from coordinator._cli import main

RHAIPOOL = Path(sys.executable).with_name("rhaipool")


def rhaipool(*args: str | Path) -> Result:
    """The command in-process (a subprocess per call would spend seconds importing)."""
    return CliRunner().invoke(main, [str(a) for a in args])


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_generate_writes_a_zmq_certificate_pair_with_safe_modes_whatever_the_umask(tmp_path: Path) -> None:
    directory = tmp_path / "keys"
    done = subprocess.run(
        [str(RHAIPOOL), "keys", "generate", str(directory), "node1"],
        check=False, capture_output=True, text=True, timeout=60, preexec_fn=lambda: os.umask(0),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    public, secret = directory / "node1.key", directory / "node1.key_secret"
    assert (mode(directory), mode(public), mode(secret)) == (0o700, 0o644, 0o600)
    public_key, no_secret = zmq.auth.load_certificate(public)
    same_public, secret_key = zmq.auth.load_certificate(secret)
    assert no_secret is None and secret_key is not None and same_public == public_key
    assert zmq.curve_public(secret_key) == public_key  # a real pair, not two unrelated keys
    assert public_key.decode() in done.stdout
    assert sorted(p.name for p in directory.iterdir()) == ["node1.key", "node1.key_secret"]  # no staging left


def test_generate_never_overwrites_a_key(tmp_path: Path) -> None:
    assert rhaipool("keys", "generate", tmp_path, "node1").exit_code == 0
    before = (tmp_path / "node1.key_secret").read_bytes()
    again = rhaipool("keys", "generate", tmp_path, "node1")
    assert again.exit_code == 1
    assert "already exists" in again.stderr
    assert (tmp_path / "node1.key_secret").read_bytes() == before


@pytest.mark.parametrize("name", ["../escape", "a/b", ".hidden", "-flag", "x.key", ""])
def test_generate_refuses_names_that_are_not_plain_file_names(tmp_path: Path, name: str) -> None:
    done = rhaipool("keys", "generate", tmp_path / "keys", "--", name)
    assert done.exit_code == 2
    assert not (tmp_path / "escape.key").exists()
    assert not (tmp_path / "keys").exists() or not any((tmp_path / "keys").iterdir())


def test_list_shows_name_public_key_and_revocation(tmp_path: Path) -> None:
    for name in ("node2", "node1", "coordinator"):
        assert rhaipool("keys", "generate", tmp_path, name).exit_code == 0
    revoked = rhaipool("keys", "revoke", tmp_path, "node2")
    assert revoked.exit_code == 0, revoked.stderr

    rows = json.loads(rhaipool("keys", "list", tmp_path, "--json").stdout)
    expected_key = {
        name: zmq.auth.load_certificate(tmp_path / sub / f"{name}.key")[0].decode()
        for name, sub in (("coordinator", "."), ("node1", "."), ("node2", "revoked"))
    }
    assert rows == [
        {
            "name": "coordinator",
            "public_key": expected_key["coordinator"],
            "revoked": False,
            "has_secret": True,
        },
        {"name": "node1", "public_key": expected_key["node1"], "revoked": False, "has_secret": True},
        {"name": "node2", "public_key": expected_key["node2"], "revoked": True, "has_secret": True},
    ]
    text = rhaipool("keys", "list", tmp_path).stdout.splitlines()
    assert [line.split()[:3] for line in text] == [
        ["coordinator", expected_key["coordinator"], "authorized"],
        ["node1", expected_key["node1"], "authorized"],
        ["node2", expected_key["node2"], "revoked"],
    ]


def test_revoke_moves_the_pair_out_of_the_authorized_directory(tmp_path: Path) -> None:
    assert rhaipool("keys", "generate", tmp_path, "node1").exit_code == 0
    done = rhaipool("keys", "revoke", tmp_path, "node1")
    assert done.exit_code == 0, done.stderr
    assert list(tmp_path.glob("*.key*")) == []
    assert sorted(p.name for p in (tmp_path / "revoked").iterdir()) == ["node1.key", "node1.key_secret"]
    assert mode(tmp_path / "revoked") == 0o700
    assert mode(tmp_path / "revoked" / "node1.key_secret") == 0o600


def test_revoke_of_an_unknown_key_fails_and_its_name_stays_taken_once_revoked(tmp_path: Path) -> None:
    missing = rhaipool("keys", "revoke", tmp_path, "ghost")
    assert missing.exit_code == 2
    assert "no authorized key 'ghost'" in missing.stderr
    assert rhaipool("keys", "generate", tmp_path, "node1").exit_code == 0
    assert rhaipool("keys", "revoke", tmp_path, "node1").exit_code == 0
    reuse = rhaipool("keys", "generate", tmp_path, "node1")
    assert reuse.exit_code == 1
    assert "revoked" in reuse.stderr


def test_list_of_a_missing_directory_is_an_error(tmp_path: Path) -> None:
    done = rhaipool("keys", "list", tmp_path / "nowhere")
    assert done.exit_code == 2
    assert "not a directory" in done.stderr
    as_json = rhaipool("keys", "list", tmp_path / "nowhere", "--json")
    assert as_json.exit_code == 2
    assert json.loads(as_json.stdout)["error"]["class"] == "KeyFileError"


def test_generate_under_a_file_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    done = rhaipool("keys", "generate", tmp_path / "file" / "keys", "node1")
    assert done.exit_code == 2
    assert "cannot write keys" in done.stderr


def test_generate_and_revoke_answer_in_json_too(tmp_path: Path) -> None:
    made = json.loads(rhaipool("keys", "generate", tmp_path, "node1", "--json").stdout)
    assert made == {
        "name": "node1",
        "public_key": zmq.auth.load_certificate(tmp_path / "node1.key")[0].decode(),
        "public": str(tmp_path / "node1.key"),
        "secret": str(tmp_path / "node1.key_secret"),
    }
    again = rhaipool("keys", "generate", tmp_path, "node1", "--json")
    assert again.exit_code == 1
    assert json.loads(again.stdout)["error"]["class"] == "KeyExists"
    revoked = json.loads(rhaipool("keys", "revoke", tmp_path, "node1", "--json").stdout)
    assert revoked == {"name": "node1", "revoked": str(tmp_path / "revoked" / "node1.key")}
