"""CurveZMQ key files for the coordinator and its nodes: generate, list, revoke.

The format is ``zmq.auth``'s certificate format, so any ZeroMQ tool reads the files: ``DIR/NAME.key``
holds the public key, ``DIR/NAME.key_secret`` the public and the secret key. A key directory doubles as
an authorized-keys directory: every ``*.key`` directly in it is allowed. Revoking moves a key pair into
``DIR/revoked/``, where the authenticator (:mod:`coordinator.nodes.auth`) refuses it even if a copy of the
public key turns up in the directory again, so revocation is by key, not by file name.

Permissions are set before a file gets its final name: the pair is written into a private temporary
directory inside ``DIR`` (0700), its modes fixed (secret 0600, public 0644), then renamed into place, so
no other user can ever open the secret, not even for the instant between writing and ``chmod``.
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import zmq.auth

from coordinator.nodes.errors import KeyExists, KeyFileError

__all__ = [
    "PUBLIC_SUFFIX",
    "REVOKED_DIR",
    "SECRET_SUFFIX",
    "KeyInfo",
    "generate",
    "list_keys",
    "read_public_key",
    "revoke",
]

PUBLIC_SUFFIX = ".key"
SECRET_SUFFIX = ".key_secret"
REVOKED_DIR = "revoked"
DIR_MODE = 0o700
PUBLIC_MODE = 0o644
SECRET_MODE = 0o600
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """One key as ``rhaipool keys list`` shows it."""

    name: str
    public_key: str
    revoked: bool
    has_secret: bool
    path: Path


def _check_name(name: str) -> None:
    if not _NAME.fullmatch(name) or name.endswith((PUBLIC_SUFFIX, SECRET_SUFFIX)):
        raise KeyFileError(
            f"invalid key name {name!r}: use letters, digits, '.', '_' and '-' (not starting with '.' or '-')"
        )


def generate(directory: Path, name: str) -> tuple[Path, Path]:
    """Write a new key pair ``DIR/NAME.key`` and ``DIR/NAME.key_secret``; return (public, secret).

    Refuses to overwrite any existing key of that name, revoked ones included: a name always means one key.
    """
    _check_name(name)
    public = directory / f"{name}{PUBLIC_SUFFIX}"
    secret = directory / f"{name}{SECRET_SUFFIX}"
    try:
        if not directory.exists():
            directory.mkdir(mode=DIR_MODE, parents=True)
            directory.chmod(DIR_MODE)  # whatever the umask
        for existing in (public, secret, directory / REVOKED_DIR / public.name):
            if existing.exists():
                raise KeyExists(
                    f"{existing} already exists: choose another name (keys are never overwritten)"
                )
        _write_pair(directory, name, public, secret)
    except OSError as exc:
        raise KeyFileError(f"cannot write keys in {directory}: {exc}") from None
    return public, secret


def _write_pair(directory: Path, name: str, public: Path, secret: Path) -> None:
    staging = Path(tempfile.mkdtemp(prefix=".keygen-", dir=directory))  # mkdtemp creates it 0700
    try:
        made_public, made_secret = (Path(p) for p in zmq.auth.create_certificates(staging, name))
        made_secret.chmod(SECRET_MODE)
        made_public.chmod(PUBLIC_MODE)
        _link_new(made_secret, secret)
        try:
            _link_new(made_public, public)
        except KeyExists:
            secret.unlink()  # another process won the race for this name: leave no half pair
            raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _link_new(source: Path, target: Path) -> None:
    """Give ``source`` the name ``target`` without replacing a file another process created meanwhile."""
    try:
        os.link(source, target)
    except FileExistsError:
        raise KeyExists(
            f"{target} already exists: choose another name (keys are never overwritten)"
        ) from None


def read_public_key(path: Path) -> bytes:
    """The z85 public key in a ``.key`` or ``.key_secret`` file."""
    try:
        public, _secret = zmq.auth.load_certificate(path)
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"cannot read key file {path}: {exc}") from None
    if not public:
        raise KeyFileError(f"{path} holds no public key")
    return public


def list_keys(directory: Path) -> list[KeyInfo]:
    """Every key in ``directory`` (authorized) and in its ``revoked/`` folder, sorted by name."""
    if not directory.is_dir():
        raise KeyFileError(f"{directory} is not a directory")
    found = [_info(path, revoked=False) for path in sorted(directory.glob(f"*{PUBLIC_SUFFIX}"))]
    found += [
        _info(path, revoked=True) for path in sorted((directory / REVOKED_DIR).glob(f"*{PUBLIC_SUFFIX}"))
    ]
    return sorted(found, key=lambda info: (info.name, info.revoked))


def _info(path: Path, revoked: bool) -> KeyInfo:
    name = path.name.removesuffix(PUBLIC_SUFFIX)
    return KeyInfo(
        name=name,
        public_key=read_public_key(path).decode("ascii"),
        revoked=revoked,
        has_secret=path.with_name(f"{name}{SECRET_SUFFIX}").exists(),
        path=path,
    )


def revoke(directory: Path, name: str) -> Path:
    """Move ``NAME``'s key files into ``DIR/revoked/``; return the public key's new path.

    A running coordinator sees the rename at once (:mod:`coordinator.nodes.auth`): the key is refused
    from the next handshake on, and a node joined with it is dropped within one heartbeat. No restart.
    """
    _check_name(name)
    public = directory / f"{name}{PUBLIC_SUFFIX}"
    if not public.exists():
        raise KeyFileError(f"no authorized key {name!r} in {directory}")
    read_public_key(public)  # refuse to file away something that is not a key
    revoked_dir = directory / REVOKED_DIR
    target = revoked_dir / public.name
    if target.exists():
        raise KeyExists(f"{target} already exists: a revoked key of that name is already filed")
    try:
        revoked_dir.mkdir(mode=DIR_MODE, exist_ok=True)
        os.replace(public, target)  # the revocation itself: one atomic rename
        secret = directory / f"{name}{SECRET_SUFFIX}"
        if secret.exists():
            os.replace(secret, revoked_dir / secret.name)
    except OSError as exc:
        raise KeyFileError(f"cannot revoke {name!r} in {directory}: {exc}") from None
    return target
