"""The engine processes of a killed vf-vllm end (verifiers/inference/server/parent_watch.py), here with
plain multiprocessing children instead of vLLM's; test_server.py kills a real server's main pid."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil  # a vLLM dependency
import pytest

from verifiers.inference.server import parent_watch
from verifiers.inference.server.parent_watch import still_running

ROOT = Path(__file__).resolve().parents[3]

# A parent that starts a spawned child (as vLLM starts its engine core), prints the child's pid
# and waits. The child runs the plugin hook, as vLLM does in each of its processes, and sleeps.
PARENT = textwrap.dedent(
    """
    import multiprocessing, sys, time

    def child():
        from verifiers.inference.server import parent_watch
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


def start(tmp_path: Path, watch: str | None) -> tuple[subprocess.Popen, psutil.Process]:
    script = tmp_path / "parent.py"  # spawn re-imports the main module from its file
    script.write_text(PARENT)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(parent_watch.ENV, None)
    if watch is not None:
        env[parent_watch.ENV] = watch
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    child = psutil.Process(int(proc.stdout.readline()))
    assert proc.stdout.readline().strip() == "ready"
    return proc, child


@pytest.mark.parametrize("watch", ["1", "0", None])
def test_a_child_ends_with_its_killed_parent_only_where_vf_vllm_asked(tmp_path, watch):
    parent, child = start(tmp_path, watch)

    def alive() -> bool:
        return bool(still_running([child]))

    try:
        assert alive()
        parent.kill()  # SIGKILL: the parent runs no cleanup, as in a kill -9 of vf-vllm
        parent.wait(10)
        # The watch looks once a second: 2 s shows a child left alone; one watched ends sooner.
        deadline = time.monotonic() + (10 if watch == "1" else 2)
        while alive() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert alive() is (watch != "1")
    finally:
        parent.stdout.close()
        if alive():
            child.kill()


def test_the_hook_does_nothing_outside_a_multiprocessing_child(monkeypatch):
    monkeypatch.setenv(parent_watch.ENV, "1")
    monkeypatch.setattr(parent_watch, "_started", False)
    parent_watch.register()  # pytest's own process: nobody's multiprocessing child
    assert not parent_watch._started


def test_still_running_counts_a_zombie_and_a_reaped_process_as_ended():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    child = psutil.Process(proc.pid)
    try:
        assert still_running([child]) == [proc.pid]
        proc.kill()
        deadline = time.monotonic() + 10
        while child.status() != psutil.STATUS_ZOMBIE and time.monotonic() < deadline:
            time.sleep(0.05)  # killed, not yet reaped: a zombie, as under a non-reaping init
        assert child.status() == psutil.STATUS_ZOMBIE
        assert still_running([child]) == []
    finally:
        proc.kill()
        proc.wait()
    assert still_running([child]) == []  # reaped: no such process


# A launcher (vf-rl, a benchmark) that starts a "server" (here a Python child that runs vf-vllm's
# first call, watch_launcher, then sleeps), prints its pid and waits. NAMED says whose pid the
# launcher puts in the child's environment: its own, init's (a variable leaked from elsewhere), none.
LAUNCHER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    from verifiers.inference.server import parent_watch

    child = (
        "import time; from verifiers.inference.server import parent_watch; "
        "print(parent_watch.watch_launcher(), flush=True); time.sleep(600)"
    )
    env = {**os.environ}
    named = sys.argv[1]
    if named == "self":
        env.update(parent_watch.launcher_env())
    elif named == "init":
        env[parent_watch.LAUNCHER_ENV] = "1"
    proc = subprocess.Popen([sys.executable, "-c", child], env=env, start_new_session=True)
    print(proc.pid, flush=True)
    time.sleep(600)
    """
)


@pytest.mark.parametrize("named", ["self", "init", "none"])
def test_a_server_ends_with_its_killed_launcher_only_when_the_launcher_named_itself(tmp_path, named):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(parent_watch.LAUNCHER_ENV, None)
    env.pop(parent_watch.ENV, None)
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, named], stdout=subprocess.PIPE, text=True, env=env
    )
    server = psutil.Process(int(launcher.stdout.readline()))
    try:
        deadline = time.monotonic() + 30
        while server.status() != psutil.STATUS_SLEEPING and time.monotonic() < deadline:
            time.sleep(0.05)  # its imports done, asleep (the watch, if any, started before)
        time.sleep(0.5)
        launcher.kill()  # SIGKILL: the launcher runs no cleanup
        launcher.wait(10)
        deadline = time.monotonic() + (10 if named == "self" else 2)
        while still_running([server]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert bool(still_running([server])) is (named != "self")
    finally:
        launcher.stdout.close()
        if still_running([server]):
            server.kill()


# The same with a real vf-vllm: a launcher process starts it as tests/doubles/vllm_server.py does (which
# names the launcher), waits until it answers, and is killed with SIGKILL.
REAL_LAUNCHER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tests.doubles.vllm_server import Server

    server = Server(Path(sys.argv[1]), Path(sys.argv[2]))
    server.start()
    print(server.proc.pid, flush=True)
    server.wait_ready()
    print("ready", flush=True)
    time.sleep(600)
    """
)


@pytest.mark.slow
def test_a_real_vf_vllm_ends_with_its_killed_launcher_engine_included(tmp_path, tiny_model_dir):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(parent_watch.LAUNCHER_ENV, None)
    launcher = subprocess.Popen(
        [sys.executable, "-c", REAL_LAUNCHER, str(tiny_model_dir), str(tmp_path)],
        stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT,
    )  # fmt: skip
    server = psutil.Process(int(launcher.stdout.readline()))
    tree: list[psutil.Process] = []
    try:
        assert launcher.stdout.readline().strip() == "ready", (tmp_path / "server.log").read_text()[-3000:]
        tree = [server, *server.children(recursive=True)]  # vf-vllm, its engine core (and workers)
        assert len(tree) >= 2
        launcher.kill()
        launcher.wait(10)
        # The watch looks once a second; vLLM's own shutdown then takes a few seconds on 2 cores.
        deadline = time.monotonic() + 60
        while still_running(tree) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert still_running(tree) == []
    finally:
        launcher.stdout.close()
        for p in tree or [server]:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
