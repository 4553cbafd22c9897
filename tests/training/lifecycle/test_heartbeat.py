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
