"""Paths a process owns (verifiers/utils/owned_files.py): what a killed owner left is removed,
what a live one holds is not. The owners are real child processes, killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from verifiers.utils import owned_files

ROOT = Path(__file__).resolve().parents[2]

# A child that makes one file (argv[2] == "file") or folder in argv[1], or holds the existing
# path argv[1] ("hold"), prints its path and waits.
OWNER = textwrap.dedent(
    """
    import os, sys, time
    from verifiers.utils import owned_files
    base, kind = sys.argv[1], sys.argv[2]
    if kind == "file":
        path = os.path.join(base, "weights")
        os.write(owned_files.create_file(path), b"x" * 1000)
    elif kind == "hold":
        path = base
        owned_files.hold(path)
    else:
        path = owned_files.create_dir("ipc-", base)
        open(os.path.join(path, "socket"), "w").close()
    if kind == "exit":
        owned_files.release_all()
        os._exit(130)
    print(path, flush=True)
    time.sleep(600)
    """
)


def start_owner(base: Path, kind: str) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, str(base), kind], cwd=ROOT, stdout=subprocess.PIPE, text=True
    )
    return proc, proc.stdout.readline().strip()


def kill(proc: subprocess.Popen) -> None:
    proc.send_signal(signal.SIGKILL)
    proc.wait(10)
    proc.stdout.close()


def test_a_killed_owners_file_and_folder_are_removed_a_live_owners_are_not(tmp_path):
    live, live_file = start_owner(tmp_path, "file")
    try:
        (tmp_path / "sub").mkdir()
        dead, dead_dir = start_owner(tmp_path / "sub", "dir")
        kill(dead)
        assert Path(dead_dir, "socket").exists()  # SIGKILL: no cleanup ran
        assert owned_files.remove_abandoned([live_file, dead_dir], min_age_s=0) == {dead_dir: 0}
        assert not Path(dead_dir).exists() and Path(live_file).read_bytes() == b"x" * 1000
    finally:
        kill(live)
    assert owned_files.remove_abandoned([live_file], min_age_s=0) == {live_file: 1000}
    assert not Path(live_file).exists()


def test_what_this_process_holds_is_kept_and_released_on_request(tmp_path):
    path = str(tmp_path / "mine")
    fd = owned_files.create_file(path)
    folder = owned_files.create_dir("d-", tmp_path)
    assert {path, folder} <= set(owned_files.held())
    assert owned_files.remove_abandoned([path, folder], min_age_s=0) == {}  # our own lock blocks it
    os.write(fd, b"abc")
    owned_files.release(path)
    owned_files.release(folder)
    assert not os.path.exists(path) and not os.path.exists(folder)
    assert not {path, folder} & set(owned_files.held())


def test_release_all_before_os_exit_leaves_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-c", OWNER, str(tmp_path), "exit"], cwd=ROOT, timeout=60)
    assert proc.returncode == 130 and list(tmp_path.iterdir()) == []


def test_young_missing_and_linked_paths_are_left_alone(tmp_path):
    young = tmp_path / "young"  # no lock yet: it may be between its creation and its lock
    young.write_text("y")
    old = tmp_path / "old"
    old.write_text("o")
    hour_ago = time.time() - 3600
    os.utime(old, (hour_ago, hour_ago))
    link = tmp_path / "link"
    link.symlink_to(old)
    os.utime(link, (hour_ago, hour_ago), follow_symlinks=False)
    missing = tmp_path / "missing"
    found = owned_files.remove_abandoned([young, link, missing, old])
    assert found == {str(old): 1} and young.exists() and link.is_symlink() and not old.exists()


def test_a_handed_over_folder_stays_while_its_new_holder_lives(tmp_path):
    """The adapter-folder handover: the writer holds, the reader holds too, the writer lets go.
    The folder then lives as long as the reader, however the reader ends."""
    folder = tmp_path / "adapter"
    folder.mkdir()
    owned_files.hold(folder)
    owned_files.hold(folder)  # a second hold of ours takes no second lock (one disown drops it)
    reader, _ = start_owner(folder, "hold")
    try:
        owned_files.disown(folder)
        assert str(folder) not in owned_files.held() and folder.is_dir()
        assert owned_files.remove_abandoned([folder], min_age_s=0) == {}  # the reader holds it
    finally:
        kill(reader)
    assert owned_files.remove_abandoned([folder], min_age_s=0) == {str(folder): 0}
    assert not folder.exists()


# A child that takes commands on stdin: "hold P" holds P, "go P" lets go of P and prints whether
# it removed it. One child serves many rounds (a fresh interpreter each round would be slow).
HOLDER = textwrap.dedent(
    """
    import sys
    from verifiers.utils import owned_files
    for line in sys.stdin:
        verb, path = line.split()
        if verb == "hold":
            owned_files.hold(path)
            print("held", flush=True)
        else:
            print(owned_files.let_go(path), flush=True)
    """
)


def test_the_last_holder_to_let_go_removes_the_path(tmp_path):
    """A handover whose outcome is unknown (a trainer's adapter load that timed out, a server whose
    load failed): each side lets go, and the folder goes with the last, in either order or at once."""
    child = subprocess.Popen(
        [sys.executable, "-c", HOLDER], cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )

    def ask(line: str) -> str:
        child.stdin.write(line + "\n")
        child.stdin.flush()
        return child.stdout.readline().strip()

    try:
        folder = tmp_path / "adapter"
        folder.mkdir()
        owned_files.hold(folder)
        assert ask(f"hold {folder}") == "held"
        assert owned_files.let_go(folder) is False and folder.is_dir()  # the child still holds it
        assert owned_files.let_go(folder) is False  # not ours any more: nothing to do
        assert ask(f"go {folder}") == "True" and not folder.exists()

        for k in range(200):  # both at once: exactly one of the two removes it, never neither nor both
            path = tmp_path / f"race-{k}"
            path.mkdir()
            owned_files.hold(path)
            assert ask(f"hold {path}") == "held"
            child.stdin.write(f"go {path}\n")
            child.stdin.flush()
            ours = owned_files.let_go(path)
            theirs = child.stdout.readline().strip() == "True"
            assert ours != theirs and not path.exists(), k
            assert str(path) not in owned_files.held()
    finally:
        child.stdin.close()
        child.wait(10)
        child.stdout.close()
