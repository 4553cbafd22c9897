"""vf-rl's trainer watch (cli/rl/trainer_watch.py) on a fake clock. (The trainer's heartbeat files it
reads: training/lifecycle/test_heartbeat.py; the [trainer] keys that drive it:
cli/run_config/test_load_trainer_keys.py; redone steps in metrics.jsonl: training/rl/test_step_line.py.)"""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")

from verifiers.cli.rl.trainer_watch import (  # noqa: E402
    Beat,
    Stall,
    TrainerWatch,
)
from verifiers.training.lifecycle import heartbeat as hb  # noqa: E402

LIVE, STEP = hb.LIVE, hb.STEP


def watch(tmp_path, step_bound: float | None = 600.0) -> TrainerWatch:
    return TrainerWatch(tmp_path / "beats", live_bound_s=30.0, step_bound_s=step_bound)


# -- the watch, on a fake clock -----------------------------------------------------------------


def test_beats_that_keep_changing_never_stall(tmp_path):
    w = watch(tmp_path)
    for t in range(0, 3600, 2):  # an hour of beats every 2 s (live) and every 60 s (step)
        beats = {(0, LIVE): Beat(1000.0 + t, 42), (0, STEP): Beat(1000.0 + t - t % 60, 42)}
        assert w.observe(beats, now=float(t)) is None


def test_a_stopped_rank_is_named_by_its_live_beat_once_past_the_bound(tmp_path):
    w = watch(tmp_path)
    rank0 = {(0, LIVE): Beat(5.0, 10), (0, STEP): Beat(5.0, 10)}
    stopped = {(1, LIVE): Beat(5.0, 11), (1, STEP): Beat(1.0, 11)}
    assert w.observe({**rank0, **stopped}, now=0.0) is None
    for t in (10.0, 20.0, 30.0):  # rank 0 beats on; rank 1's files keep their stamps
        rank0 = {(0, LIVE): Beat(5.0 + t, 10), (0, STEP): Beat(5.0 + t, 10)}
        assert w.observe({**rank0, **stopped}, now=t) is None  # 30 s: not past the bound yet
    stall = w.observe({**rank0, **stopped}, now=31.0)
    assert stall == Stall(rank=1, pid=11, kind=LIVE, silent_s=31.0)
    assert stall.line() == "trainer rank 1 (pid 11) made no progress for 31 s (stopped?)"


def test_a_loop_stuck_while_its_thread_beats_is_found_by_the_progress_bound(tmp_path):
    w = watch(tmp_path, step_bound=120.0)
    for t in range(0, 121, 2):
        assert w.observe({(0, LIVE): Beat(float(t), 7), (0, STEP): Beat(0.5, 7)}, now=float(t)) is None
    stall = w.observe({(0, LIVE): Beat(122.0, 7), (0, STEP): Beat(0.5, 7)}, now=122.0)
    assert stall is not None and stall.kind == STEP and stall.rank == 0
    assert stall.line() == "trainer rank 0 (pid 7) made no progress for 122 s (hung in a step?)"


def test_no_progress_bound_watches_only_the_live_beat(tmp_path):
    w = watch(tmp_path, step_bound=None)
    assert w.observe({(0, LIVE): Beat(0.0, 7), (0, STEP): Beat(0.0, 7)}, now=0.0) is None
    assert w.observe({(0, LIVE): Beat(9e3, 7), (0, STEP): Beat(0.0, 7)}, now=9e3) is None


def test_age_counts_on_the_watchers_clock_not_the_stamp(tmp_path):
    """An old stamp seen for the first time is fresh (clock skew, a jump, vf-rl paused meanwhile)."""
    w = watch(tmp_path)
    assert w.observe({(0, LIVE): Beat(-1e6, 7)}, now=500.0) is None
    assert w.observe({(0, LIVE): Beat(-1e6, 7)}, now=529.0) is None
    assert w.observe({(0, LIVE): Beat(-1e6, 7)}, now=531.0).silent_s == 31.0


def test_reset_forgets_the_last_attempt_and_clears_its_files(tmp_path):
    w = watch(tmp_path)
    w.reset()
    hb.Heartbeat(w.folder, 0).progress()
    w.observe({(0, LIVE): Beat(1.0, 7)}, now=0.0)
    assert w.reached_training()
    w.reset()
    assert w.seen == {} and list(w.folder.iterdir()) == [] and not w.reached_training()
