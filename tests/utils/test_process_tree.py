"""A process and every process below it, from /proc (utils/process_tree.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from verifiers.utils import process_tree
from verifiers.utils.process_tree import descendants

linux = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")


def test_descendants_follow_the_tree():
    ppids = {10: 1, 11: 10, 12: 11, 13: 1, 14: 13}
    assert descendants({10}, ppids) == {10, 11, 12}
    assert descendants({10, 13}, ppids) == {10, 11, 12, 13, 14}


def test_no_proc_folder_is_an_empty_table_and_a_tree_of_one(tmp_path):
    assert process_tree.parent_pids(tmp_path / "absent") == {}
    assert process_tree.tree(4242, tmp_path / "absent") == {4242}


@linux
def test_the_tree_reaches_a_grandchild_in_a_session_of_its_own(tmp_path):
    # As torch's elastic agent starts a rank: start_new_session=True, so not in the child's group.
    code = (
        "import subprocess, sys, time; "
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'], start_new_session=True); "
        f"open({str(tmp_path / 'pid')!r}, 'w').write(str(p.pid)); time.sleep(60)"
    )
    child = subprocess.Popen([sys.executable, "-c", code], start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        while not (tmp_path / "pid").exists() or not (tmp_path / "pid").read_text():
            assert time.monotonic() < deadline
            time.sleep(0.05)
        grandchild = int((tmp_path / "pid").read_text())
        assert os.getpgid(grandchild) != os.getpgid(child.pid)  # a group kill would miss it
        assert process_tree.tree(child.pid) == {child.pid, grandchild}
        assert process_tree.running({child.pid, grandchild}) == {child.pid, grandchild}
        process_tree.signal_all({grandchild}, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while process_tree.running({grandchild}):  # a zombie until its parent reaps it: not running
            assert time.monotonic() < deadline
            time.sleep(0.05)
    finally:
        child.kill()
        child.wait()
