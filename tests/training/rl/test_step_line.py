"""The step line: the guides' fields, then elapsed time, ETA and where the step's time went."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("transformers")

from verifiers.training.rl import output as rl_output  # noqa: E402
from verifiers.training.rl.output import StepClock, StepLogger, format_duration, format_step_line  # noqa: E402

LOGS = {
    "reward": 0.45,
    "entropy": 2.34,
    "importance_ratio/mean": 1.02,
    "loss": 0.0123,
    "learning_rate": 1e-5,
    "time/wait_generation_s": 4.12,
    "time/train_s": 9.8,
    "time/sync_s": 0.61,
    "time/step_s": 14.5,
}


def test_durations_read_at_a_glance():
    assert [format_duration(s) for s in (0, 44.6, 192, 3599, 3840, 90061)] == [
        "0s",
        "45s",
        "3m12s",
        "59m59s",
        "1h04m",
        "25h01m",
    ]
    assert format_duration(14 * 60 + 20, coarse=True) == "14m" and format_duration(30, coarse=True) == "30s"


def test_step_line_keeps_the_guides_shape_and_adds_time():
    line = format_step_line(12, 200, LOGS, elapsed_s=192, eta_s=14 * 60)
    assert line == (
        "Step 12/200: reward=0.450 entropy=2.340 importance_ratio=1.020 loss=0.0123 lr=1.00e-05"
        " | 3m12s elapsed, ETA 14m | gen-wait 4.1s train 9.8s sync 0.6s"
    )
    # Without the trainer's step timing (another trainer's logs) the line is the guides' line alone.
    untimed = {k: v for k, v in LOGS.items() if not k.startswith("time/")}
    assert format_step_line(12, 200, untimed, 192, 840) == line.split(" | ")[0]
    # A part that is not logged is left out rather than shown as 0.
    no_sync = {k: v for k, v in LOGS.items() if k != "time/sync_s"}
    assert format_step_line(1, 2, no_sync).endswith(
        ": reward=0.450 entropy=2.340 importance_ratio=1.020 "
        "loss=0.0123 lr=1.00e-05 | gen-wait 4.1s train 9.8s"
    )


def test_eta_is_the_mean_of_recent_steps_times_the_steps_left(monkeypatch):
    now = [100.0]
    monkeypatch.setattr(rl_output.time, "perf_counter", lambda: now[0])
    clock = StepClock(window=3)
    clock.start(0)
    now[0] = 160.0
    assert clock.tick(1, 11, 60.0) == (60.0, 600.0)  # a slow first step (warm-up) alone: 60 s x 10
    clock.tick(2, 11, 10.0)
    clock.tick(3, 11, 10.0)
    assert clock.tick(4, 11, 10.0)[1] == pytest.approx(70.0)  # the warm-up step has left the window
    # One log for two steps (logging_steps=2) carries their mean and counts twice.
    assert clock.tick(6, 11, 4.0)[1] == pytest.approx(6.0 * 5)
    assert clock.tick(11, 11, 4.0)[1] == 0.0
    clock.start(5)  # a resumed run: elapsed and the window start again
    now[0] = 170.0
    assert clock.tick(6, 11, 2.0) == (10.0, 10.0)


def test_step_logger_prints_the_timed_line(tmp_path, capsys, monkeypatch):
    now = [0.0]
    monkeypatch.setattr(rl_output.time, "perf_counter", lambda: now[0])
    logger = StepLogger(str(tmp_path))
    args = SimpleNamespace(output_dir=str(tmp_path))
    state = SimpleNamespace(is_world_process_zero=True, global_step=0, max_steps=4)
    logger.on_train_begin(args, state, None)
    for step in (1, 2):
        now[0] += 14.5
        state.global_step = step
        logger.on_log(args, state, None, logs=dict(LOGS))
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("| 14s elapsed, ETA 44s | gen-wait 4.1s train 9.8s sync 0.6s")
    assert out[1].startswith("Step 2/4: reward=0.450") and out[1].endswith(
        "| 29s elapsed, ETA 29s | gen-wait 4.1s train 9.8s sync 0.6s"
    )
