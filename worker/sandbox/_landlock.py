"""Landlock through raw syscalls (444/445/446 on every Linux architecture).

Policy: handle every filesystem right the kernel's ABI knows and allow only
reading (files and directory listings) beneath the given paths, so Python can keep
importing; writes, exec, device ioctls, socket-file creation and everything else are
denied everywhere. ABI >= 4 also denies TCP bind/connect; ABI >= 6 scopes abstract
Unix sockets and signals to our own domain.

Connecting to a *pathname* Unix socket (zmq ``ipc://``) is not mediated by Landlock
up to ABI 7, so the ipc directory needs no rule; should a later ABI add such a right,
the ipc directory is where the rule would go.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from collections.abc import Iterable

from worker.sandbox._process import LayerResult, libc

__all__ = ["abi_version", "apply"]

_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1

ACCESS_FS_EXECUTE = 1 << 0
ACCESS_FS_WRITE_FILE = 1 << 1
ACCESS_FS_READ_FILE = 1 << 2
ACCESS_FS_READ_DIR = 1 << 3
# ABI 1 rights are bits 0..12; ABI 2 adds REFER (13), ABI 3 TRUNCATE (14), ABI 5 IOCTL_DEV (15).
_FS_BITS_BY_ABI = {1: 13, 2: 14, 3: 15, 4: 15, 5: 16}
# Rights that may appear in a rule on a non-directory (others give EINVAL there).
_FILE_RIGHTS = ACCESS_FS_EXECUTE | ACCESS_FS_WRITE_FILE | ACCESS_FS_READ_FILE | (1 << 14) | (1 << 15)
ACCESS_NET_BIND_TCP = 1 << 0
ACCESS_NET_CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
SCOPE_SIGNAL = 1 << 1


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _err() -> str:
    err = ctypes.get_errno()
    return f"{errno.errorcode.get(err, err)} ({os.strerror(err)})"


def abi_version() -> tuple[int, str]:
    """Best ABI the kernel offers, or 0 with the reason Landlock is unusable."""
    flags = ctypes.c_uint32(_CREATE_RULESET_VERSION)
    abi = int(libc.syscall(_SYS_CREATE_RULESET, None, ctypes.c_size_t(0), flags))
    if abi < 0:
        err = ctypes.get_errno()
        why = {errno.ENOSYS: "kernel built without Landlock", errno.EOPNOTSUPP: "Landlock disabled at boot"}
        return 0, why.get(err, _err())
    return abi, f"ABI {abi}"


def _ruleset_attr(abi: int) -> tuple[_RulesetAttr, int, list[str]]:
    """The attribute for this ABI and its size (older kernels reject unknown trailing fields)."""
    fs_bits = _FS_BITS_BY_ABI.get(abi, 16)
    attr = _RulesetAttr((1 << fs_bits) - 1, 0, 0)
    size = 8
    denied = ["all filesystem writes/exec/create/remove" + (", truncate" if abi >= 3 else "")]
    if abi >= 4:
        attr.handled_access_net = ACCESS_NET_BIND_TCP | ACCESS_NET_CONNECT_TCP
        size = 16
        denied.append("TCP bind/connect")
    if abi >= 6:
        attr.scoped = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL
        size = 24
        denied.append("abstract-UDS connect and signals outside the worker")
    return attr, size, denied


def _add_read_rule(ruleset_fd: int, path: str, handled: int) -> str | None:
    """Allow reading beneath ``path``; return why not, or None on success."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except OSError as exc:
        return f"{path}: {exc.strerror}"
    try:
        rights = ACCESS_FS_READ_FILE | ACCESS_FS_READ_DIR
        if not stat.S_ISDIR(os.fstat(fd).st_mode):
            rights &= _FILE_RIGHTS
        rule = _PathBeneathAttr(rights & handled, fd)
        if libc.syscall(_SYS_ADD_RULE, ruleset_fd, _RULE_PATH_BENEATH, ctypes.byref(rule), 0) != 0:
            return f"{path}: landlock_add_rule {_err()}"
    finally:
        os.close(fd)
    return None


def apply(read_paths: Iterable[str], ipc_dir: str | None) -> LayerResult:
    """Restrict this thread (and threads created later) to read-only access beneath ``read_paths``."""
    abi, why = abi_version()
    if abi <= 0:
        return False, why
    attr, size, denied = _ruleset_attr(abi)
    ruleset_fd = int(libc.syscall(_SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(size), 0))
    if ruleset_fd < 0:
        return False, f"landlock_create_ruleset: {_err()}"
    try:
        allowed: list[str] = []
        skipped: list[str] = []
        for path in dict.fromkeys(read_paths):
            problem = _add_read_rule(ruleset_fd, path, attr.handled_access_fs)
            (skipped if problem else allowed).append(problem or path)
        if libc.syscall(_SYS_RESTRICT_SELF, ruleset_fd, 0) != 0:
            return False, f"landlock_restrict_self: {_err()}"
    finally:
        os.close(ruleset_fd)
    detail = f"ABI {abi}; read-only beneath {allowed}; denied: {'; '.join(denied)}"
    if skipped:
        detail += f"; rules skipped: {skipped}"
    if ipc_dir:
        detail += f"; {_ipc_dir_note(ipc_dir)}"
    return True, detail


def _ipc_dir_note(ipc_dir: str) -> str:
    """The ipc directory needs no rule; say whether it is as private as the design expects."""
    note = f"ipc_dir {ipc_dir}: no rule needed (pathname-UDS connect is not mediated up to ABI 7)"
    try:
        info = os.stat(ipc_dir)
    except OSError as exc:
        return f"{note}; WARNING: cannot stat it ({exc.strerror})"
    if not stat.S_ISDIR(info.st_mode) or info.st_mode & 0o077:
        return f"{note}; WARNING: not a 0700 directory (mode {stat.filemode(info.st_mode)})"
    return note
