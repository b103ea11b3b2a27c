"""The coordinator's CurveZMQ gate: which node keys may connect, decided afresh at every handshake.

ZeroMQ asks a ZAP handler (RFC 27) about each new CURVE connection. pyzmq's ``configure_curve(location=)``
reads the key directory once, so a revoked key would stay welcome until a restart; here the handler asks
:class:`AuthorizedKeys`, which looks at the directory on every handshake (one ``scandir``, the files are
re-read only when a name, inode, size or mtime changed). Revoking is therefore a rename on disk, and the
next handshake with that key is refused. A connection already established is not cut by the revocation.

Fail closed: a CURVE server socket with no ZAP handler on its context accepts every client key, so
:func:`curve_server` takes the running authenticator and refuses to configure a socket without one.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import zmq
import zmq.asyncio
import zmq.auth
from zmq.auth.asyncio import AsyncioAuthenticator

from coordinator.nodes.errors import KeyFileError
from coordinator.nodes.keys import PUBLIC_SUFFIX, REVOKED_DIR, read_public_key

__all__ = ["ZAP_DOMAIN", "AuthorizedKeys", "curve_authenticator", "curve_client", "curve_server"]

ZAP_DOMAIN = "rhaipool-nodes"
REFUSAL_LOG_INTERVAL = 60.0
"""Seconds between two warnings about the same refused key (a refused peer retries every 100 ms)."""
_MAX_REMEMBERED_REFUSALS = 1024
log = logging.getLogger("coordinator.nodes")

_Signature = tuple[tuple[str, int, int, int], ...]


class AuthorizedKeys:
    """The z85 public keys in a directory, minus every key filed under its ``revoked/`` folder."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._signature: _Signature | None = None
        self._allowed: frozenset[bytes] = frozenset()
        self._revoked: frozenset[bytes] = frozenset()
        self._refusals_logged: dict[bytes, float] = {}

    def allows(self, public_key: bytes) -> bool:
        """Whether ``public_key`` (z85) may connect now; refusals are logged (once a minute per key)."""
        self._refresh()
        if public_key in self._revoked:
            return self._refuse(public_key, f"revoked ({self.directory / REVOKED_DIR})")
        if public_key not in self._allowed:
            return self._refuse(public_key, f"not in {self.directory}")
        return True

    def _refuse(self, public_key: bytes, why: str) -> bool:
        now = time.monotonic()
        last = self._refusals_logged.get(public_key)
        if last is None or now - last >= REFUSAL_LOG_INTERVAL:
            if len(self._refusals_logged) >= _MAX_REMEMBERED_REFUSALS:
                self._refusals_logged.clear()
            self._refusals_logged[public_key] = now
            log.warning("refused node key %s: %s", public_key.decode(), why)
        return False

    def callback(self, domain: str, key: bytes) -> bool:
        """pyzmq's credentials-provider hook (``Authenticator.configure_curve_callback``).

        Never raises: an exception would end pyzmq's ZAP task and leave every later handshake unanswered.
        """
        try:
            return self.allows(key)
        except Exception:
            log.exception("refused node key %s: the authorized keys could not be checked", key.decode())
            return False

    def _refresh(self) -> None:
        signature = _signature(self.directory) + _signature(self.directory / REVOKED_DIR)
        if signature == self._signature:
            return
        self._allowed = _load(self.directory)
        self._revoked = _load(self.directory / REVOKED_DIR)
        self._signature = signature


def _public_key_files(directory: Path) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(directory) as entries:
            return [e for e in entries if e.name.endswith(PUBLIC_SUFFIX) and e.is_file()]
    except FileNotFoundError:
        return []
    except OSError as exc:  # unreadable: allow nobody, and say so
        log.error("cannot read authorized keys directory %s: %s", directory, exc)
        return []


def _signature(directory: Path) -> _Signature:
    found = []
    for entry in _public_key_files(directory):
        try:
            st = entry.stat()  # follows symlinks: a Kubernetes Secret update swaps their targets
        except OSError:  # removed since the scandir: it is not there
            continue
        found.append((entry.name, st.st_ino, st.st_size, st.st_mtime_ns))
    return tuple(sorted(found))


def _load(directory: Path) -> frozenset[bytes]:
    keys = set()
    for entry in _public_key_files(directory):
        try:
            keys.add(read_public_key(Path(entry.path)))
        except KeyFileError as exc:  # one bad file must not lock every node out
            log.error("ignoring %s", exc)
    return frozenset(keys)


@contextlib.contextmanager
def curve_authenticator(
    context: zmq.asyncio.Context, authorized_keys: Path
) -> Iterator[AsyncioAuthenticator]:
    """Run a ZAP handler on ``context`` (inside a running event loop) admitting ``authorized_keys``."""
    authenticator = AsyncioAuthenticator(context, log=log)
    authenticator.start()
    try:
        authenticator.configure_curve_callback(ZAP_DOMAIN, AuthorizedKeys(authorized_keys))
        yield authenticator
    finally:
        authenticator.stop()


def _key_pair(secret_key_file: Path) -> tuple[bytes, bytes]:
    try:
        public, secret = zmq.auth.load_certificate(secret_key_file)
    except (OSError, ValueError) as exc:
        raise KeyFileError(f"cannot read secret key file {secret_key_file}: {exc}") from None
    if not secret:
        raise KeyFileError(f"{secret_key_file} holds no secret key (pass the .key_secret file)")
    return public, secret


def curve_server(
    socket: zmq.Socket[bytes], secret_key_file: Path, authenticator: AsyncioAuthenticator
) -> None:
    """Make ``socket`` a CURVE server with the coordinator's key, gated by ``authenticator`` (before bind)."""
    if authenticator.context is not socket.context or authenticator.zap_socket is None:
        raise RuntimeError("curve_server needs a running authenticator on the socket's own context")
    public, secret = _key_pair(secret_key_file)
    socket.curve_publickey = public
    socket.curve_secretkey = secret
    socket.zap_domain = ZAP_DOMAIN.encode()
    socket.curve_server = True


def curve_client(socket: zmq.Socket[bytes], secret_key_file: Path, server_key_file: Path) -> None:
    """Make ``socket`` a CURVE client with a node's key that only talks to the server key
    given (before connect)."""
    public, secret = _key_pair(secret_key_file)
    socket.curve_publickey = public
    socket.curve_secretkey = secret
    socket.curve_serverkey = read_public_key(server_key_file)
