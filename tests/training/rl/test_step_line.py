"""What a run prints and logs (verifiers/training/rl/output.py): the step line (the guides' fields, then
elapsed time, ETA and where the step's time went), and steps logged again after a restart or a resume
marked as redone in metrics.jsonl."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("transformers")

from verifiers.training.lifecycle import heartbeat as hb  # noqa: E402
from verifiers.training.rl import output as rl_output  # noqa: E402
from verifiers.training.rl.output import StepClock, StepLogger, format_duration, format_step_line  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_process")  # tests/training/rl/conftest.py

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


def test_step_line_format():
    logs = {
        "reward": 0.52,
        "entropy": 2.31,
        "importance_ratio/mean": 1.01,
        "loss": 0.0123,
        "learning_rate": 1e-5,
    }
    assert format_step_line(12, 100, logs) == (
        "Step 12/100: reward=0.520 entropy=2.310 importance_ratio=1.010 loss=0.0123 lr=1.00e-05"
    )
    assert format_step_line(1, 2, {"loss": 0.5}) == "Step 1/2: loss=0.5"


def test_step_logger_prints_and_appends_metrics(tmp_path, capsys):
    logger = rl_output.StepLogger(str(tmp_path))
    state = SimpleNamespace(is_world_process_zero=True, global_step=3, max_steps=10)
    args = SimpleNamespace(output_dir=str(tmp_path))
    logger.on_log(args, state, None, logs={"loss": 0.25, "reward": 0.5, "learning_rate": 2e-5})
    logger.on_log(args, state, None, logs={"eval_reward": 0.75})
    logger.on_log(args, state, None, logs={"train_runtime": 120.0})
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "Step 3/10: reward=0.500 loss=0.25 lr=2.00e-05"
    assert out[1] == "Eval at step 3: reward=0.750"
    assert out[2].startswith("Done: 3 steps in 2.0 min")
    rows = [
        json.loads(line) for line in (tmp_path / "runs" / rl_output.METRICS_FILE).read_text().splitlines()
    ]
    assert rows[0] == {"step": 3, "loss": 0.25, "reward": 0.5, "learning_rate": 2e-5}
    other = SimpleNamespace(is_world_process_zero=False, global_step=3, max_steps=10)
    logger.on_log(args, other, None, logs={"loss": 1.0})
    assert capsys.readouterr().out == ""


def test_sample_schedule_switches_log_completions():
    schedule = rl_output.SampleSchedule(every=5)
    args = SimpleNamespace(log_completions=False)
    seen = []
    for step in range(11):
        schedule.on_step_begin(args, SimpleNamespace(global_step=step), None)
        seen.append(args.log_completions)
    assert [s for s, on in enumerate(seen) if on] == [0, 5, 10]
    rl_output.SampleSchedule(every=0).on_step_begin(args, SimpleNamespace(global_step=0), None)
    assert args.log_completions is False
