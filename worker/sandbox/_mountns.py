"""A private mount namespace whose root holds only what the worker may read, plus its ipc directory.

Why, on top of Landlock: up to ABI 7 Landlock does not mediate ``connect(2)`` to
*pathname* Unix sockets, so a compromised worker could reach any socket its uid
may write (``/run/docker.sock`` for a root worker, the coordinator's other
endpoints, a D-Bus bus). After ``pivot_root`` into a tmpfs that carries read-only
bind mounts of the import paths and the ipc directory, no other path exists.

Needs the user namespace from the netns step (for CAP_SYS_ADMIN inside it) and must
run after the pre-import and before capabilities are dropped.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterable

from worker.errors import WorkerError
from worker.sandbox._process import CLONE_NEWNS, LayerResult, errno_text, libc

__all__ = ["apply"]

MS_RDONLY = 1
MS_NOSUID = 2
MS_NODEV = 4
MS_NOEXEC = 8
MS_REMOUNT = 32
MS_NOATIME = 1024
MS_NODIRATIME = 2048
MS_BIND = 4096
MS_REC = 16384
MS_PRIVATE = 1 << 18
MS_RELATIME = 1 << 21
MNT_DETACH = 2
_SYS_PIVOT_ROOT = 155 if os.uname().machine == "x86_64" else 41  # aarch64: 41
# statvfs f_flag bit -> mount flag; a remount inside a user namespace must keep these ("locked").
_LOCKED = {1: MS_RDONLY, 2: MS_NOSUID, 4: MS_NODEV, 8: MS_NOEXEC, 1024: MS_NOATIME, 2048: MS_NODIRATIME,
           4096: MS_RELATIME}  # fmt: skip
_ROOT_CANDIDATES = ("/tmp", "/mnt", "/var/tmp")

libc.mount.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_ulong, ctypes.c_char_p]
libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]


class _Refused(WorkerError):
    """One step failed; the message says which and why (caught in this module: never leaves it)."""


def _b(text: str | None) -> bytes | None:
    return text.encode() if text is not None else None


def _mount(source: str | None, target: str, fstype: str | None, flags: int, data: str | None = None) -> None:
    if libc.mount(_b(source), _b(target), _b(fstype), flags, _b(data)) != 0:
        raise _Refused(errno_text(f"mount({source!r} -> {target!r})"))


def _map_ids(uid: int, gid: int) -> str:
    """Map our own uid/gid into a fresh user namespace so we may create mount points."""
    with open("/proc/self/uid_map", encoding="ascii") as fh:
        if fh.read().strip():
            return "ids already mapped"
    for path, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
        with open(f"/proc/self/{path}", "w", encoding="ascii") as fh:
            fh.write(text)
    return f"uid {uid}/gid {gid} mapped to themselves"


def _bind_read_only(fd: int, source: str, root: str) -> None:
    """Bind ``source`` (held open as ``fd``) at the same path under ``root``, read-only."""
    target = root + source
    if os.path.isdir(f"/proc/self/fd/{fd}"):
        os.makedirs(target, exist_ok=True)
    else:
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "ab"):
            pass
    _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND | MS_REC)
    flags = os.statvfs(target).f_flag
    locked = sum(ms for st, ms in _LOCKED.items() if flags & st)
    _mount(None, target, None, MS_REMOUNT | MS_BIND | MS_RDONLY | locked)


def _pick_root() -> str:
    for candidate in _ROOT_CANDIDATES:
        if os.path.isdir(candidate) and not os.path.islink(candidate):
            return candidate
    raise _Refused(f"no mount point for the new root among {_ROOT_CANDIDATES}")


def _build_and_pivot(paths: list[str], uid: int, gid: int) -> str:
    if libc.unshare(CLONE_NEWNS) != 0:
        raise _Refused(errno_text("unshare(CLONE_NEWNS)"))
    mapped = _map_ids(uid, gid)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)
    fds = {path: os.open(path, os.O_PATH | os.O_CLOEXEC) for path in paths}  # before the tmpfs hides any
    try:
        root = _pick_root()
        _mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=0755,size=64k,nr_inodes=256")
        for path in sorted(paths, key=len):
            _bind_read_only(fds[path], path, root)
    finally:
        for fd in fds.values():
            os.close(fd)
    os.chdir(root)
    if libc.syscall(_SYS_PIVOT_ROOT, b".", b".") != 0:
        raise _Refused(errno_text("pivot_root"))
    if libc.umount2(b".", MNT_DETACH) != 0:
        raise _Refused(errno_text("umount2(old root)"))
    os.chdir("/")
    _mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC)
    return mapped


def apply(read_paths: Iterable[str], ipc_dir: str | None, uid: int, gid: int) -> LayerResult:
    """Pivot into a root holding only ``read_paths`` and ``ipc_dir`` (all read-only binds)."""
    if not ipc_dir:
        return False, "no ipc_dir in the config: the worker would lose its endpoint, so not applied"
    if not os.path.isdir(ipc_dir):
        return False, f"ipc_dir {ipc_dir} is not a directory"
    wanted = [os.path.realpath(p) for p in read_paths if os.path.exists(p)]
    ipc = os.path.realpath(ipc_dir)
    if not any(ipc == p or ipc.startswith(p.rstrip("/") + "/") for p in wanted):
        wanted.append(ipc)
    try:
        mapped = _build_and_pivot(list(dict.fromkeys(wanted)), uid, gid)
    except (_Refused, OSError) as exc:
        return False, str(exc)
    return True, f"pivot_root into a read-only tmpfs holding only {wanted}; {mapped}; old root detached"
