"""The coordinator's CurveZMQ gate: which node keys may connect, decided on what the key directory holds now.

ZeroMQ asks a ZAP handler (RFC 27) about each new CURVE connection. pyzmq's ``configure_curve(location=)``
reads the key directory once, so a revoked key would stay welcome until a restart; here the handler asks
:class:`AuthorizedKeys`, which looks at the directory on every handshake. Its files are re-read when the
directory's listing changed (which file, where, its inode, size, mtime or ctime: a rename into
``revoked/`` changes the folder and the ctime, a Kubernetes Secret update the inodes behind the links),
and whenever the last reading is a second old, so whatever a listing could miss is seen within a second
of the next look. A revoked or deleted key is therefore refused from the next handshake on; the node
link (:mod:`coordinator.nodes.link`) asks the same gate about its joined nodes every half heartbeat and
drops those whose key is no longer authorized.

Fail closed: a CURVE server socket with no ZAP handler on its context accepts every client key, so
:func:`curve_server` takes the running authenticator and refuses to configure a socket without one; an
unreadable directory admits nobody.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import zmq
import zmq.asyncio
import zmq.auth
from zmq.auth.asyncio import AsyncioAuthenticator

from coordinator.nodes.errors import KeyFileError
from coordinator.nodes.keys import PUBLIC_SUFFIX, REVOKED_DIR, read_public_key

__all__ = ["ZAP_DOMAIN", "AuthorizedKeys", "KeySet", "curve_authenticator", "curve_client", "curve_server"]

ZAP_DOMAIN = "rhaipool-nodes"
REREAD_INTERVAL = 1.0
"""Seconds after which the key files are read again even if the directory's listing looks unchanged."""
REFUSAL_LOG_INTERVAL = 60.0
"""Seconds between two warnings about the same refused key (a refused node tries again and again)."""
_MAX_REMEMBERED = 1024
log = logging.getLogger("coordinator.nodes")

_Entry = tuple[str, int, int, int, int, int]
"""(name, device, inode, size, mtime_ns, ctime_ns) of one public key file, links followed."""
_Listing = tuple[_Entry, ...]


@dataclass(frozen=True, slots=True)
class KeySet:
    """The keys one reading of the directory found: z85 public key → the file that names it."""

    directory: Path
    allowed: dict[bytes, str] = field(default_factory=dict)
    revoked: dict[bytes, str] = field(default_factory=dict)

    def refusal(self, public_key: bytes) -> str | None:
        """Why ``public_key`` (z85) may not connect (None: it may)."""
        if public_key in self.revoked:
            return f"revoked (filed as {self.directory / REVOKED_DIR / self.revoked[public_key]})"
        if public_key not in self.allowed:
            return f"not in {self.directory}"
        return None


@dataclass(slots=True)
class _Refusals:
    """When a key's refusal was last logged, and how many refusals came since."""

    logged: float
    since: int = 0


class AuthorizedKeys:
    """The z85 public keys in a directory, minus every key filed under its ``revoked/`` folder."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self._listing: tuple[_Listing, _Listing] | None = None
        self._read_at = 0.0
        self._keys = KeySet(directory)
        self._refusals: dict[bytes, _Refusals] = {}
        self._bad_files: set[_Entry] = set()
        self._troubles: dict[Path, str] = {}

    def current(self) -> KeySet:
        """The keys as the directory holds them now (read again if it changed, or a second went by)."""
        authorized = self._scan(self.directory)  # None: missing or unreadable, nobody is admitted
        revoked = self._scan(self.directory / REVOKED_DIR) if authorized is not None else None
        listing = (authorized or (), revoked or ())
        now = time.monotonic()
        if listing != self._listing or now - self._read_at >= REREAD_INTERVAL:
            self._keys = KeySet(
                self.directory,
                self._read(self.directory, listing[0]),
                self._read(self.directory / REVOKED_DIR, listing[1]),
            )
            self._listing, self._read_at = listing, now
        return self._keys

    def check(self, public_key: bytes) -> str | None:
        """Why ``public_key`` (z85) may not connect now, None if it may; a refusal is logged
        (at once, then at most once a minute per key, with the count of attempts between)."""
        why = self.current().refusal(public_key)
        if why is not None:
            self._log_refusal(public_key, why)
        return why

    def allows(self, public_key: bytes) -> bool:
        """Whether ``public_key`` (z85) may connect now (a refusal is logged, as :meth:`check` does)."""
        return self.check(public_key) is None

    def callback(self, domain: str, key: bytes) -> bool:
        """pyzmq's credentials-provider hook (``Authenticator.configure_curve_callback``).

        Never raises: an exception would end pyzmq's ZAP task and leave every later handshake unanswered.
        """
        try:
            return self.allows(key)
        except Exception:
            log.exception("refused node key %s: the authorized keys could not be checked", key.decode())
            return False

    def _log_refusal(self, public_key: bytes, why: str) -> None:
        now = time.monotonic()
        seen = self._refusals.get(public_key)
        if seen is not None and now - seen.logged < REFUSAL_LOG_INTERVAL:
            seen.since += 1
            return
        if len(self._refusals) >= _MAX_REMEMBERED:
            self._refusals.clear()
        self._refusals[public_key] = _Refusals(now)
        again = f" ({seen.since} more attempts in the last {now - seen.logged:.0f} s)" if seen else ""
        log.warning("refused node key %s: %s%s", public_key.decode(), why, again)

    def _scan(self, directory: Path) -> _Listing | None:
        """The ``*.key`` files directly in ``directory``, each with what changes when it is replaced;
        None if it cannot be read (a missing ``revoked/`` is normal: it holds nothing)."""
        found = []
        try:
            with os.scandir(directory) as entries:
                for entry in entries:
                    if not entry.name.endswith(PUBLIC_SUFFIX):
                        continue
                    try:
                        st = entry.stat()  # follows symlinks: a Kubernetes Secret update swaps their targets
                    except OSError:  # removed since the scandir (or a dangling link): it is not there
                        continue
                    if stat.S_ISREG(st.st_mode):
                        found.append(
                            (entry.name, st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
                        )
        except FileNotFoundError:
            if directory != self.directory:
                return ()
            self._trouble(
                directory, f"authorized keys directory {directory} does not exist: no node is admitted"
            )
            return None
        except OSError as exc:  # unreadable: what it would have admitted is not admitted, and said so
            self._trouble(directory, f"cannot read authorized keys directory {directory}: {exc}")
            return None
        self._trouble(directory, None)
        return tuple(sorted(found))

    def _trouble(self, directory: Path, problem: str | None) -> None:
        """Log a problem with a directory once when it starts, and once when it is over: never a flood."""
        if problem == self._troubles.get(directory):
            return
        if problem is not None:
            self._troubles[directory] = problem
            log.error("%s", problem)
        else:
            del self._troubles[directory]
            log.warning("authorized keys directory %s is readable again", directory)

    def _read(self, directory: Path, listing: _Listing) -> dict[bytes, str]:
        keys: dict[bytes, str] = {}
        for entry in listing:
            try:
                keys[read_public_key(directory / entry[0])] = entry[0]
            except KeyFileError as exc:  # one bad file must not lock every node out; said once per version
                if entry not in self._bad_files:
                    if len(self._bad_files) >= _MAX_REMEMBERED:
                        self._bad_files.clear()
                    self._bad_files.add(entry)
                    log.error("ignoring %s", exc)
        return keys


@contextlib.contextmanager
def curve_authenticator(
    context: zmq.asyncio.Context, authorized_keys: Path | AuthorizedKeys
) -> Iterator[AsyncioAuthenticator]:
    """Run a ZAP handler on ``context`` (inside a running event loop) admitting ``authorized_keys``.

    Pass the :class:`AuthorizedKeys` itself to share it (the node link checks its joined nodes with it).
    """
    gate = authorized_keys if isinstance(authorized_keys, AuthorizedKeys) else AuthorizedKeys(authorized_keys)
    authenticator = AsyncioAuthenticator(context, log=log)
    authenticator.start()
    try:
        authenticator.configure_curve_callback(ZAP_DOMAIN, gate)
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
