"""vf-vllm's files (verifiers/inference/server/files.py): the engine sockets' private folder, and what a
killed server left (its socket folder, rendezvous file and shared memory) removed at the next start,
and only what vLLM makes. Tier 2 (stand-in server processes, a short temp dir)."""

from __future__ import annotations

import pytest

pytest.importorskip("vllm")

import contextlib
import os
import tempfile
import time
from pathlib import Path


def test_engine_sockets_get_a_directory_of_their_own_unless_the_user_chose_one(short_tmp, monkeypatch):
    from verifiers.inference.server.files import private_ipc_dir

    monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))  # the user's temp dir
    env: dict[str, str] = {}
    with private_ipc_dir(env) as path:
        assert env == {"VLLM_RPC_BASE_PATH": path} and Path(path).parent == short_tmp
        (Path(path) / "engine-socket").touch()  # what vLLM binds there
    assert env == {} and list(short_tmp.iterdir()) == []
    env = {"VLLM_RPC_BASE_PATH": str(short_tmp)}  # the user's: used as is, never deleted
    with private_ipc_dir(env) as path:
        assert path is None and env == {"VLLM_RPC_BASE_PATH": str(short_tmp)}
    assert short_tmp.is_dir()
    long_tmp = short_tmp / ("d" * (107 - len(str(short_tmp)) - 40))  # a socket path under it would not fit
    long_tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(long_tmp))
    with private_ipc_dir(env := {}) as path:
        assert path is None and env == {}  # vLLM's default (the temp dir itself) stays


# A vf-vllm stand-in: its socket folder (private_ipc_dir), and a rendezvous file and shared memory
# (a segment and a named semaphore, as vLLM's engine makes) listed in it as the real server lists them.
SOCKET_FOLDER_OWNER = """
import multiprocessing, sys, tempfile, time
from multiprocessing import shared_memory
from pathlib import Path
from verifiers.inference.server.files import note_leftovers, private_ipc_dir, shared_memory_of_this_server
tempfile.tempdir = sys.argv[1]
with private_ipc_dir({}) as folder:
    rendezvous = Path(sys.argv[1], "vllm_dist_" + Path(folder).name[-8:].replace("_", "0"))
    rendezvous.touch()
    (Path(folder) / "engine-socket").touch()
    segment = shared_memory.SharedMemory(create=True, size=4096)
    lock = multiprocessing.get_context("spawn").Lock()  # spawn: its name stays until the end
    note_leftovers(folder, [str(rendezvous), *shared_memory_of_this_server()])
    shm = ["/dev/shm/" + segment.name, "/dev/shm/sem." + lock._semlock.name.lstrip("/")]
    print(folder, rendezvous, *shm, flush=True)
    time.sleep(600)
"""


def test_a_killed_servers_socket_folder_rendezvous_file_and_shared_memory_go_at_the_next_start(
    short_tmp, monkeypatch
):
    import signal
    import subprocess
    import sys

    from verifiers.inference.server.files import private_ipc_dir

    root = Path(__file__).resolve().parents[3]
    cmd = [sys.executable, "-c", SOCKET_FOLDER_OWNER, str(short_tmp)]
    # Each in a group of its own, with its resource tracker: killed together, as a crash ends a server.
    owners = [
        subprocess.Popen(cmd, cwd=root, stdout=subprocess.PIPE, text=True, start_new_session=True)
        for _ in range(2)
    ]
    dead_shm: list[Path] = []
    live_shm: list[Path] = []
    try:
        (dead, dead_file, *dead_shm), (live, live_file, *live_shm) = (
            list(map(Path, p.stdout.readline().split())) for p in owners
        )
        listed = (dead / "leftovers").read_text().split()
        assert listed == [str(dead_file), *sorted(map(str, dead_shm))]  # the semaphore found by its inode
        os.killpg(owners[0].pid, signal.SIGKILL)
        owners[0].wait(10)
        foreign = short_tmp / "vllm_dist_0123abcd"  # a plain `vllm serve`'s: listed nowhere
        foreign.touch()
        hour_ago = time.time() - 3600  # past the age below which nothing is removed
        for path in (dead, live):
            os.utime(path, (hour_ago, hour_ago))
        time.sleep(0.5)  # the killed group's resource tracker is gone too: nothing removes them but us
        assert dead.is_dir() and dead_file.exists() and all(p.exists() for p in dead_shm)
        monkeypatch.setattr(tempfile, "tempdir", str(short_tmp))
        with private_ipc_dir({}) as mine:
            assert not dead.exists() and not dead_file.exists()
            assert not [p for p in dead_shm if p.exists()]
            assert live.is_dir() and live_file.exists() and foreign.exists() and Path(mine).is_dir()
            assert all(p.exists() for p in live_shm)
        assert not Path(mine).exists()
    finally:
        for p in owners:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
            p.stdout.close()
        for path in (*dead_shm, *live_shm):  # the live owner's, and ours if the test failed
            path.unlink(missing_ok=True)


def test_a_killed_servers_list_removes_only_what_vllm_makes(short_tmp):
    """The list is data: a path not named as vLLM names its files, or elsewhere, or a link, stays."""
    import secrets

    from verifiers.inference.server.files import IPC_PREFIX, note_leftovers, remove_abandoned_ipc_dirs

    tag = secrets.token_hex(4)
    (short_tmp / "sub").mkdir()
    kept = [
        Path(f"/dev/shm/vf-test-other-{tag}"),  # /dev/shm, but not a name vLLM uses
        short_tmp / "sub" / f"vllm_dist_{tag}",  # a rendezvous name, not beside the folder
        short_tmp / f"psm_{tag}",  # a segment name, not in /dev/shm
        Path(f"/dev/shm/psm_{tag}-target"),  # what the link below points to (not listed itself)
    ]
    link = Path(f"/dev/shm/psm_{tag}")
    gone = [short_tmp / f"vllm_dist_{tag}", Path(f"/dev/shm/sem.mp-{tag}")]
    folder = short_tmp / f"{IPC_PREFIX}{tag}"  # no lock: its server is gone
    folder.mkdir()
    try:
        for path in (*kept, *gone):
            path.write_bytes(b"x")
        link.symlink_to(kept[-1])
        note_leftovers(str(folder), [str(p) for p in (*kept[:-1], link, *gone)])
        hour_ago = time.time() - 3600
        os.utime(folder, (hour_ago, hour_ago))
        remove_abandoned_ipc_dirs(str(short_tmp))
        assert not folder.exists() and not [p for p in gone if p.exists()]
        assert [p for p in kept if not p.exists()] == [] and link.is_symlink()
    finally:
        for path in (*kept, *gone, link):
            path.unlink(missing_ok=True)
