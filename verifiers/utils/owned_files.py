"""Files and folders a process keeps in a shared directory (``/dev/shm``, the temp dir), marked
as its own for as long as it lives, so that what a killed process left can be told apart and removed.

A process that is killed (SIGKILL, the OOM killer) or leaves with ``os._exit`` runs no cleanup.
The weight-transfer file a trainer keeps in ``/dev/shm`` is a whole model's weights held in
memory, and would stay there until a reboot; vf-vllm's socket folder would stay in /tmp.

* :func:`create_file` / :func:`create_dir` make the path and take a shared ``flock`` on it. The
  kernel drops that lock when the process ends, however it ends (and a forked child that
  inherits the descriptor holds it too). :func:`hold` takes it on a path that exists already:
  one this process made by other means, or one another process hands over (the adapter folder
  a trainer writes and vf-vllm then serves). Several processes may hold one path.
* :func:`remove_abandoned`, run by the next process that makes such paths, removes the ones
  whose lock it can take: no process holds them any more.
* :func:`release` unlinks one path and drops its lock; :func:`release_all` does it for every path
  this process still holds, for an exit that skips the usual cleanup (``os._exit``).
  :func:`disown` drops the lock and leaves the path: another process holds it now.
  :func:`let_go` is for a handover whose outcome is unknown (a request that timed out): it drops
  the lock and removes the path only if no other process holds it, so the last holder removes it.

A lock, not the pid in a name: containers that share ``/dev/shm`` (``--ipc=host``) do not share
pids, and a pid can be reused. A path younger than ``min_age_s`` is never removed: between its
creation and its lock there is an instant in which another process could take the lock.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import stat
import tempfile
import time
from collections.abc import Iterable

MIN_AGE_S = 10.0  # far longer than the gap between a path's creation and its lock
SHM_DIR = "/dev/shm"  # where POSIX shared memory (shm_open, sem_open) lives on Linux

# path -> the descriptor that holds its shared lock. No threading.Lock around it: release_all
# runs in a signal handler, which would deadlock on a lock its own thread holds; each dict
# operation here is a single atomic one.
_held: dict[str, int] = {}


def _hold(path: str, fd: int) -> None:
    # A file system without locks (some network mounts) fails here; the path is then never
    # removed by remove_abandoned either, whose own lock fails the same way.
    with contextlib.suppress(OSError):
        fcntl.flock(fd, fcntl.LOCK_SH)
    _held[path] = fd


def create_file(path: str | os.PathLike, mode: int = 0o666) -> int:
    """Create ``path`` (it must not exist yet), owned by this process; returns an open read-write
    descriptor. The path stays this process's until :func:`release` (the descriptor is closed then)."""
    path = os.fspath(path)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, mode)
    _hold(path, fd)
    return fd


def create_dir(prefix: str, base: str | os.PathLike | None = None) -> str:
    """A new empty folder ``<base>/<prefix><random>`` (``tempfile.mkdtemp``), owned by this process."""
    path = tempfile.mkdtemp(prefix=prefix, dir=base)
    hold(path)
    return path


def hold(path: str | os.PathLike) -> None:
    """Make the existing ``path`` (a file or folder) this process's too, until :func:`release` or
    :func:`disown`. A path this process holds already stays as it is."""
    path = os.fspath(path)
    if path not in _held:
        _hold(path, os.open(path, os.O_RDONLY))


def disown(path: str | os.PathLike) -> None:
    """Drop this process's lock on ``path`` and leave the path in place (another process holds it)."""
    fd = _held.pop(os.fspath(path), None)
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)


def release(path: str | os.PathLike) -> None:
    """Remove ``path`` (a file, or a folder and what it holds) and drop this process's lock on it."""
    _remove(os.fspath(path))  # while still locked: nobody takes it over meanwhile
    disown(path)


def let_go(path: str | os.PathLike) -> bool:
    """Drop this process's lock on ``path``, and remove the path if no other process holds it;
    returns whether it removed it. Of several holders that each let go, exactly one removes it.

    For a handover that may or may not have happened: a trainer whose request to load its adapter
    folder timed out cannot tell whether the server holds the folder (and serves from it) or
    dropped it, and the server whose load failed cannot tell whether the writer still waits.
    """
    path = os.fspath(path)
    fd = _held.pop(path, None)
    if fd is None:
        return False
    try:
        # Unlock, then try for the exclusive lock: of holders letting go at once, the later
        # finds no other lock (nobody keeps a lock they dropped), so the path never stays.
        fcntl.flock(fd, fcntl.LOCK_UN)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # another process holds it (or the file system has no locks): leave it
        os.close(fd)
        return False
    try:
        # The other holder may have let go first, removed the path and dropped its lock just
        # before ours: then the lock we got is on an unlinked inode, and there is nothing to do.
        try:
            ours = os.path.samestat(os.fstat(fd), os.lstat(path))
        except OSError:
            ours = False
        if ours:
            _remove(path)  # while locked: nobody takes it over meanwhile
    finally:
        os.close(fd)
    return ours


def release_all() -> None:
    """:func:`release` every path this process holds: before an ``os._exit``, which runs no finalizer.
    Safe in a signal handler."""
    for path in list(_held):
        release(path)


def held() -> list[str]:
    """The paths this process holds."""
    return list(_held)


def remove_abandoned(paths: Iterable[str | os.PathLike], min_age_s: float = MIN_AGE_S) -> dict[str, int]:
    """Remove each of ``paths`` that no process holds any more; returns ``{path: bytes}`` of those
    removed (a folder counts 0 bytes).

    Only this user's paths, at least ``min_age_s`` old. A path whose lock is held (by its owner,
    a child it forked, or this process) is left alone, and so is anything that cannot be opened.
    """
    removed: dict[str, int] = {}
    now, uid = time.time(), os.getuid()
    for path in map(os.fspath, paths):
        try:
            st = os.lstat(path)
            if st.st_uid != uid or now - st.st_mtime < min_age_s:
                continue
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # held: its owner lives
            os.close(fd)
            continue
        try:
            _remove(path)  # while locked: nobody takes it over meanwhile
            removed[path] = 0 if stat.S_ISDIR(st.st_mode) else st.st_size
        finally:
            os.close(fd)
    return removed


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(OSError):
            os.unlink(path)
