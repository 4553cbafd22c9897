"""The engine processes of a killed vf-vllm end (verifiers/inference/parent_watch.py), here with
plain multiprocessing children instead of vLLM's; test_server.py kills a real server's main pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from verifiers.inference import parent_watch

ROOT = Path(__file__).resolve().parents[2]

# A parent that starts a spawned child (as vLLM starts its engine core), prints the child's pid
# and waits. The child runs the plugin hook, as vLLM does in each of its processes, and sleeps.
PARENT = textwrap.dedent(
    """
    import multiprocessing, sys, time

    def child():
        from verifiers.inference import parent_watch
        parent_watch.register()
        print("ready", flush=True)
        time.sleep(600)

    if __name__ == "__main__":
        proc = multiprocessing.get_context("spawn").Process(target=child)
        proc.start()
        print(proc.pid, flush=True)
        time.sleep(600)
    """
)


def alive(pid: int) -> bool:
    """Running and not a zombie (a re-parented child is reaped by whoever adopted it, if at all)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def start(tmp_path: Path, watch: str | None) -> tuple[subprocess.Popen, int]:
    script = tmp_path / "parent.py"  # spawn re-imports the main module from its file
    script.write_text(PARENT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(parent_watch.ENV, None)
    if watch is not None:
        env[parent_watch.ENV] = watch
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    child = int(proc.stdout.readline())
    assert proc.stdout.readline().strip() == "ready"
    return proc, child


@pytest.mark.parametrize("watch", ["1", "0", None])
def test_a_child_ends_with_its_killed_parent_only_where_vf_vllm_asked(tmp_path, watch):
    parent, child = start(tmp_path, watch)
    try:
        assert alive(child)
        parent.kill()  # SIGKILL: the parent runs no cleanup, as in a kill -9 of vf-vllm
        parent.wait(10)
        # The watch looks once a second: 2 s shows a child left alone; one watched ends sooner.
        deadline = time.monotonic() + (10 if watch == "1" else 2)
        while alive(child) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert alive(child) is (watch != "1")
    finally:
        parent.stdout.close()
        if alive(child):
            os.kill(child, signal.SIGKILL)


def test_the_hook_does_nothing_outside_a_multiprocessing_child(monkeypatch):
    monkeypatch.setenv(parent_watch.ENV, "1")
    monkeypatch.setattr(parent_watch, "_started", False)
    parent_watch.register()  # pytest's own process: nobody's multiprocessing child
    assert not parent_watch._started
