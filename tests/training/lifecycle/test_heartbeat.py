"""The trainer's heartbeat files (verifiers/training/lifecycle/heartbeat.py): they hold the pid and are
touched, exist only under vf-rl, and the progress callback beats at each step (read back with vf-rl's
reader, cli/rl/trainer_watch.py). Tier 2 (real files in ``tmp_path``, a short-period thread)."""

from __future__ import annotations

import os
import time

import pytest

pytest.importorskip("transformers")

from verifiers.cli.rl.trainer_watch import Beat, read_beats  # noqa: E402
from verifiers.training.lifecycle import heartbeat as hb  # noqa: E402
from verifiers.utils import process_tree  # noqa: E402

LIVE, STEP = hb.LIVE, hb.STEP


def test_heartbeat_files_hold_the_pid_and_are_touched(tmp_path):
    folder = tmp_path / "beats"
    beat = hb.Heartbeat(folder, rank=2, pid=4321).start(period=0.05)
    try:
        first = read_beats(folder)
        assert first == {(2, LIVE): Beat(first[(2, LIVE)].stamp, 4321)}  # no step beat before training
        os.utime(hb.beat_path(folder, 2, LIVE), (0, 0))
        time.sleep(0.3)
        assert read_beats(folder)[(2, LIVE)].stamp > 0  # the thread beat again
        beat.progress()
        assert read_beats(folder)[(2, STEP)].pid == 4321
    finally:
        beat.stop.set()


def test_heartbeat_only_under_vf_rl(tmp_path, monkeypatch):
    monkeypatch.delenv(hb.ENV_DIR, raising=False)
    assert hb.start_from_env() is None
    monkeypatch.setenv(hb.ENV_ATTEMPT, "3")
    assert hb.attempt() == 3
    monkeypatch.setenv(hb.ENV_ATTEMPT, "x")
    assert hb.attempt() is None


def test_progress_callback_beats_at_each_step(tmp_path):
    beat = hb.Heartbeat(tmp_path, 0)
    callback = hb.progress_callback(beat)
    callback.on_step_end(None, None, None)
    assert (0, STEP) in read_beats(tmp_path)


def test_the_beat_thread_ends_the_rank_once_its_launcher_is_gone(tmp_path):
    ended = []
    beat = hb.Heartbeat(tmp_path, 0, parent=os.getppid(), on_orphan=ended.append).start(period=0.02)
    time.sleep(0.2)
    assert ended == []  # the launcher is there: beats go on
    beat.stop.set()
    gone = os.getppid() + 1_000_000  # a parent that is not this process's any more
    hb.Heartbeat(tmp_path, 0, parent=gone, on_orphan=ended.append).start(period=0.02)
    deadline = time.monotonic() + 5
    while not ended:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    assert ended == [gone]
    hb.Heartbeat(tmp_path, 1, on_orphan=ended.append).start(period=0.02).stop.set()  # no parent: not watched


ORPHAN = """
import os, subprocess, sys, time
from verifiers.training.lifecycle import heartbeat as hb
if sys.argv[1] == "launcher":  # starts the rank, says its pid, then is killed by the test
    rank = subprocess.Popen([sys.executable, __file__, "rank"], env={**os.environ, hb.ENV_DIR: sys.argv[2]})
    print(rank.pid, flush=True)
    time.sleep(120)
else:  # a rank under vf-rl: trains for two minutes unless its launcher goes
    hb.start_from_env()
    time.sleep(120)
"""


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="reads /proc")
def test_a_rank_whose_launcher_is_killed_ends_within_a_few_beats(tmp_path):
    """torch's elastic agent starts each rank in a session of its own: a SIGKILL of the agent (vf-rl's
    kill of the trainer, the OOM killer) reached no rank, and the orphans trained on."""
    import signal
    import subprocess
    import sys

    script = tmp_path / "orphan.py"
    script.write_text(ORPHAN)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
    env = {**os.environ, "PYTHONPATH": root}
    launcher = subprocess.Popen(
        [sys.executable, str(script), "launcher", str(tmp_path / "beats")], stdout=subprocess.PIPE, env=env
    )
    rank = int(launcher.stdout.readline())
    try:
        deadline = time.monotonic() + 30
        while not hb.beat_path(tmp_path / "beats", 0, LIVE).exists():  # the rank's thread runs
            assert time.monotonic() < deadline
            time.sleep(0.05)
        launcher.kill()
        launcher.wait()
        deadline = time.monotonic() + 3 * hb.LIVE_BEAT_S + 5
        while process_tree.running({rank}):  # a zombie has ended
            assert time.monotonic() < deadline, "the rank outlived its launcher"
            time.sleep(0.1)
    finally:
        try:
            os.kill(rank, signal.SIGKILL)
        except ProcessLookupError:
            pass
