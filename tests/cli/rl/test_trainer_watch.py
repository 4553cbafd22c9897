"""vf-rl's trainer watch (cli/rl/trainer_watch.py) on a fake clock, the trainer's heartbeat files
(training/lifecycle/heartbeat.py), the [trainer] keys that drive them, and redone steps in metrics.jsonl."""

from __future__ import annotations

import json
import os
import time
from types import SimpleNamespace

import pytest

pytest.importorskip("transformers")

from tests.doubles.configs import RL_CONFIG as CONFIG  # noqa: E402
from verifiers.cli.rl.trainer_watch import (  # noqa: E402
    HANG_MARGIN_S,
    LIVE_BOUND_S,
    Beat,
    Stall,
    TrainerWatch,
    hang_bound,
    read_beats,
)
from verifiers.cli.run_config import load as tc  # noqa: E402
from verifiers.errors import ConfigError  # noqa: E402
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


# -- the trainer's side: heartbeat files --------------------------------------------------------


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


# -- [trainer] max_restarts and hang_timeout_s --------------------------------------------------


def parse(**trainer_keys):
    raw = tc.tomllib.loads(CONFIG)
    raw["trainer"].update(trainer_keys)
    return tc.parse_config(raw)


def test_trainer_keys_defaults():
    config = parse()
    assert config.trainer.max_restarts == 3 and config.trainer.hang_timeout_s is None
    # unset: the trainer's 30-minute checkpoint-write floor (above the 300 s server wait) + margin
    assert hang_bound(config) == 1800 + HANG_MARGIN_S
    assert hang_bound(parse(hang_timeout_s=90)) == 90.0
    assert hang_bound(parse(hang_timeout_s=0)) is None
    assert parse(max_restarts=0).trainer.max_restarts == 0
    assert LIVE_BOUND_S >= 10 * hb.LIVE_BEAT_S


@pytest.mark.parametrize(
    ("keys", "message"),
    [
        ({"max_restarts": -1}, "trainer.max_restarts = -1 must be >= 0"),
        ({"max_restarts": "3"}, "key 'trainer.max_restarts' must be an integer, got \"3\" (a string)"),
        ({"max_restarts": 1.5}, "key 'trainer.max_restarts' must be an integer, got 1.5 (a number)"),
        ({"hang_timeout_s": -5}, "trainer.hang_timeout_s = -5 must be >= 0 and finite"),
        ({"hang_timeout_s": "10m"}, "key 'trainer.hang_timeout_s' must be a number, got \"10m\" (a string)"),
        ({"hang_timeout": 60}, "unknown key 'trainer.hang_timeout'; did you mean 'hang_timeout_s'?"),
    ],
)
def test_bad_trainer_keys_are_one_line(keys, message):
    with pytest.raises(ConfigError) as err:
        parse(**keys)
    assert err.value.message == message


# -- metrics.jsonl: redone steps ----------------------------------------------------------------


def log_steps(output_dir, steps, monkeypatch, attempt: str | None) -> None:
    from verifiers.training.rl.output import StepLogger

    if attempt is None:
        monkeypatch.delenv(hb.ENV_ATTEMPT, raising=False)
    else:
        monkeypatch.setenv(hb.ENV_ATTEMPT, attempt)
    logger = StepLogger(str(output_dir))
    state = SimpleNamespace(global_step=steps[0] - 1, is_world_process_zero=True, max_steps=5)
    logger.on_train_begin(None, state, None)
    for step in steps:
        state.global_step = step
        logger.on_log(None, state, None, logs={"loss": 0.5, "reward": 1.0})


def test_steps_logged_again_after_a_restart_are_marked(tmp_path, monkeypatch, capsys):
    log_steps(tmp_path, [1, 2, 3], monkeypatch, attempt="1")  # killed after step 3
    log_steps(tmp_path, [3, 4, 5], monkeypatch, attempt="2")  # resumed from checkpoint-2
    lines = [json.loads(x) for x in (tmp_path / "runs" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r.get("redone"), r.get("attempt")) for r in lines] == [
        (1, None, None),
        (2, None, None),
        (3, None, None),
        (3, True, 2),
        (4, None, 2),
        (5, None, 2),
    ]
    last = {r["step"]: r for r in lines}  # a reader keeps each step's last line
    assert sorted(last) == [1, 2, 3, 4, 5]


def test_a_resume_by_hand_marks_redone_steps_too(tmp_path, monkeypatch):
    log_steps(tmp_path, [1, 2], monkeypatch, attempt=None)
    log_steps(tmp_path, [2, 3], monkeypatch, attempt=None)
    lines = [json.loads(x) for x in (tmp_path / "runs" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r.get("redone"), "attempt" in r) for r in lines] == [
        (1, None, False),
        (2, None, False),
        (2, True, False),
        (3, None, False),
    ]
