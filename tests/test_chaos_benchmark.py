"""benchmarks/chaos.py without vf-rl: the seeded schedule, the comparison rule, the table, the
closing line and ``--dry-run``. No test here starts a server or a trainer."""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(ROOT / "benchmarks"))  # its `from _common import ...`
    spec = importlib.util.spec_from_file_location("chaos_bench", ROOT / "benchmarks" / "chaos.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["chaos_bench"] = module
    try:
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("chaos_bench", None)
        sys.path.remove(str(ROOT / "benchmarks"))


# -- the schedule --------------------------------------------------------------------------------


def test_the_schedule_is_reproducible_and_keeps_its_gaps(bench):
    kinds = list(bench.KINDS)
    first = bench.schedule(7, kinds, 3600, 90)
    again = bench.schedule(7, kinds, 3600, 90)
    other = bench.schedule(8, kinds, 3600, 90)
    assert [(f.kind, f.at_s) for f in first] == [(f.kind, f.at_s) for f in again]
    assert [(f.kind, f.at_s) for f in first] != [(f.kind, f.at_s) for f in other]
    times = [f.at_s for f in first]
    assert times == sorted(times) and times[0] >= bench.FAULT_LEAD_S and times[-1] <= 3600
    assert all(b - a >= 90 - 0.1 for a, b in zip(times, times[1:], strict=False))  # rounded to 0.1 s
    assert len(first) >= 3600 / (1.5 * 90) - 1  # the hour is filled, not just its start
    # every kind once before any twice
    assert sorted(f.kind for f in first[: len(kinds)]) == sorted(kinds)


def test_the_schedule_draws_only_the_kinds_given(bench):
    faults = bench.schedule(0, ["kill_server", "stop_trainer"], 1200, 60)
    assert faults and {f.kind for f in faults} == {"kill_server", "stop_trainer"}
    assert bench.schedule(0, [], 1200, 60) == []
    assert bench.schedule(0, ["kill_server"], 5, 60) == []  # a window shorter than the lead


def test_kinds_without_a_target_are_dropped_with_a_reason(bench):
    kept, dropped = bench.usable_kinds(bench.KINDS, processes=1, disk=None, corrupt=None)
    assert "kill_rank" not in kept and "stop_rank" not in kept
    assert set(dropped) == {"kill_rank", "stop_rank"} and "--processes 2" in dropped["kill_rank"]
    kept, dropped = bench.usable_kinds(bench.KINDS, processes=2, disk="not root", corrupt="no verify")
    assert "kill_rank" in kept and "stop_rank" in kept
    assert dropped == {"full_disk": "not root", "truncate_checkpoint": "no verify"}
    # a schedule of the kept kinds never holds a dropped one
    faults = bench.schedule(3, kept, 3600, 60)
    assert not {f.kind for f in faults} & set(dropped)


def test_a_stop_is_held_past_its_detection_bound(bench):
    assert bench.stop_bound("stop_server", 12) > bench.SERVER_ANSWER_S + bench.PROBE_S
    assert bench.stop_bound("stop_engine", 12) > bench.SERVER_PROGRESS_S + bench.PROBE_S
    assert bench.stop_bound("stop_trainer", 12) > bench.TRAINER_LIVE_S
    assert bench.stop_bound("stop_rank", 12) > bench.TRAINER_LIVE_S


def test_the_step_count_fills_the_window(bench):
    assert bench.steps_for(4, 12) == 20
    assert bench.steps_for(0.1, 12) == 3 * bench.SAVE_STEPS  # room for two checkpoints and a redo


def test_the_toml_is_a_valid_vf_rl_config(bench, tmp_path):
    pytest.importorskip("transformers")
    from verifiers.cli.run_config import load as tc

    raw = tc.tomllib.loads(bench.config_toml(seed=3, steps=20, port=8123, output_dir=str(tmp_path / "o")))
    config = tc.parse_config(raw, source=tmp_path / "chaos.toml")
    assert config.inference.hang_timeout_s == bench.SERVER_ANSWER_S
    assert config.inference.progress_timeout_s == bench.SERVER_PROGRESS_S
    assert config.trainer.hang_timeout_s == bench.TRAINER_LOOP_S
    assert config.trainer.max_restarts == config.inference.max_restarts == bench.MAX_RESTARTS
    args = config.trainer.args
    assert (
        args["max_steps"] == 20 and args["grpo_args"]["seed"] == 3 and args["save_steps"] == bench.SAVE_STEPS
    )
    assert config.output_dir == tmp_path / "o"


# -- the comparison ------------------------------------------------------------------------------


def line(step: int, reward: float = 0.5, loss: float = 0.1, **extra) -> dict:
    return {"step": step, "reward": reward, "reward_std": 0.2, "loss": loss, "grad_norm": 1.0,
            "learning_rate": 5e-4, "time/step_s": 9.0 + step, **extra}  # fmt: skip


REFERENCE = [line(s, reward=s / 10, loss=0.01 * s) for s in range(1, 7)]


def test_a_run_whose_redone_steps_repeat_their_data_is_exact(bench):
    # killed after step 4 was logged, resumed from checkpoint-2: steps 3 and 4 logged again
    faulted = [dict(r) for r in REFERENCE[:4]]
    faulted += [dict(REFERENCE[2], redone=True, attempt=2), dict(REFERENCE[3], redone=True, attempt=2)]
    faulted += [dict(r, attempt=2) for r in REFERENCE[4:]]
    result = bench.compare(faulted, REFERENCE, 6, rtol=1e-4)
    assert result["exact"] and result["missing"] == [] and result["broken"] == []
    assert "reward" in result["bit_exact_fields"] and "loss" in result["bit_exact_fields"]
    assert result["last_line_bit_exact_steps"] == result["steps_compared"] == 6


def test_a_redone_step_on_other_data_breaks_exactness(bench):
    # the redone copy of step 3 saw other rollouts (another reward): a step trained twice on different data
    faulted = [dict(r) for r in REFERENCE]
    faulted.insert(3, dict(REFERENCE[2], reward=0.99, redone=True, attempt=2))
    result = bench.compare(faulted, REFERENCE, 6, rtol=1e-4)
    assert not result["exact"]
    assert result["broken"] == [
        {"step": 3, "field": "reward", "redone": True, "attempt": 2, "faulted": 0.99, "reference": 0.3}
    ]
    # even when the last copy of the step is right, the first (a different batch) counts
    faulted = [dict(REFERENCE[0]), dict(REFERENCE[1], reward=0.0)] + [dict(r) for r in REFERENCE[1:]]
    assert not bench.compare(faulted, REFERENCE, 6, rtol=1e-4)["exact"]


def test_model_fields_may_differ_within_the_tolerance_data_fields_may_not(bench):
    close = [dict(r, loss=r["loss"] * (1 + 1e-6)) for r in REFERENCE]
    result = bench.compare(close, REFERENCE, 6, rtol=1e-4)
    assert result["exact"] and "loss" in result["close_fields"] and "loss" not in result["bit_exact_fields"]
    assert 0 < result["max_rel_diff"]["loss"] < 1e-5
    assert result["last_line_bit_exact_steps"] == 0
    far = [dict(r, loss=r["loss"] * 1.01) for r in REFERENCE]
    assert not bench.compare(far, REFERENCE, 6, rtol=1e-4)["exact"]
    data = [dict(r, reward_std=r["reward_std"] + 1e-12) for r in REFERENCE]
    assert not bench.compare(data, REFERENCE, 6, rtol=1e-4)["exact"]  # the rollouts themselves changed


def test_a_missing_step_is_lost_and_not_exact(bench):
    result = bench.compare([dict(r) for r in REFERENCE if r["step"] != 5], REFERENCE, 6, rtol=1e-4)
    assert result["missing"] == [5] and not result["exact"]
    assert not bench.compare([], REFERENCE, 6, rtol=1e-4)["exact"]


def test_only_step_lines_are_compared(bench):
    records = [*REFERENCE, {"step": 6, "eval_reward": 0.3}, {"step": 6, "train_runtime": 100.0}, "junk"]
    assert bench.train_lines(records) == REFERENCE


# -- the report ----------------------------------------------------------------------------------

CLOSING = re.compile(r"faults=\d+ survived=\d+ lost_steps=\d+ max_detect_s=\d+ max_recover_s=\d+ exact=[01]")


def test_the_closing_line_and_the_table(bench):
    a = bench.Fault("kill_server", 30, injected_s=130.0, target="server", pid=11, detected_s=130.6,
                    detected_by="exit", recovered_s=215.4)  # fmt: skip
    b = bench.Fault("stop_trainer", 130, injected_s=230.0, target="rank 0", pid=12, released_s=262.0,
                    detected_s=261.2, detected_by="hang, resumed from checkpoint-8", recovered_s=320.0,
                    redone=[9, 10])  # fmt: skip
    c = bench.Fault(
        "stop_engine", 230, injected_s=330.0, target="engine", pid=13
    )  # never detected, never recovered
    d = bench.Fault("full_disk", 330, skipped="the run had ended")
    line = bench.closing_line([a, b, c, d], lost_steps=0, exact=True)
    assert line == "faults=3 survived=2 lost_steps=0 max_detect_s=31 max_recover_s=90 exact=1"
    assert CLOSING.fullmatch(line)
    assert bench.closing_line([], 0, False) == (
        "faults=0 survived=0 lost_steps=0 max_detect_s=0 max_recover_s=0 exact=0"
    )
    table = bench.format_table([a, b, c, d], step_s=20).splitlines()
    assert table[0].startswith("| # | fault | when (s) | target | detected after (s) | bound (s) | recovered")
    assert (
        table[3]
        == "| 2 | stop_trainer | 230 | rank 0 (pid 12) | 31 (hang, resumed from checkpoint-8) | 48 | 90 | 9,10 |"
    )
    assert table[4] == "| 3 | stop_engine | 330 | engine (pid 13) | - | 85 | - | 0 |"
    assert table[5] == "| 4 | full_disk | - | not injected: the run had ended | - | - | - | - |"


def test_each_detection_is_judged_against_its_stated_bound(bench):
    # The bounds follow the settings the TOML gives vf-rl: a longer hang timeout, a longer bound.
    assert (
        bench.detect_bound("stop_server", 20) == bench.SERVER_ANSWER_S + 2 * bench.PROBE_S + bench.GROUP_END_S
    )
    assert bench.detect_bound("stop_engine", 30) - bench.detect_bound("stop_engine", 20) == 10
    assert bench.detect_bound("full_disk", 20) is None  # found at the next checkpoint write
    fast = bench.Fault("kill_trainer", 1, injected_s=10.0, detected_s=11.0)
    slow = bench.Fault("stop_server", 1, injected_s=10.0, detected_s=10.0 + 46)
    disk = bench.Fault("full_disk", 1, injected_s=10.0, detected_s=300.0)
    assert bench.within_bounds([fast, slow, disk], 20) == (1, 2)
    missed = bench.Fault("stop_engine", 1, injected_s=10.0, released_s=110.0)  # released unnoticed
    unbounded = bench.Fault("full_disk", 1, injected_s=10.0)
    assert bench.undetected([fast, missed, unbounded], 20) == ["2:stop_engine"]


def test_faults_are_attributed_from_the_timed_lines(bench):
    kill = bench.Fault("kill_trainer", 20, injected_s=100.0, target="trainer", pid=5)
    stop = bench.Fault("stop_server", 120, injected_s=200.0, target="server", pid=6, released_s=231.0)
    record = {
        "exit": 0,
        "seconds": 400.0,
        "notes": [
            (
                100.4,
                "Trainer exited with SIGKILL at 01:02:03; restarting it (1/1000) from checkpoint-4 in 2 s",
            ),
            (
                230.5,
                "Inference server (pid 6) did not answer /vf/progress for 25 s at 01:04:00 (stopped or "
                "deadlocked; inference.hang_timeout_s = 20); killed it, restarting it (1/1000) in 2 s",
            ),
        ],  # fmt: skip
        "steps": [
            (90.0, line(6)),
            (150.0, line(5, redone=True)),
            (160.0, line(6, redone=True)),
            (170.0, line(7)),
            (290.0, line(8)),
        ],  # fmt: skip
    }
    bench.attribute([kill, stop], record)
    assert kill.detect_after() == pytest.approx(0.4) and kill.detected_by == "exit, resumed from checkpoint-4"
    assert kill.recover_after() == pytest.approx(50.0) and kill.redone == [5, 6]
    assert stop.detect_after() == pytest.approx(30.5) and stop.detected_by == "hang"
    assert stop.recover_after() == pytest.approx(90.0) and stop.redone == []


def test_where_a_restart_resumed_from_is_read(bench):
    for where in ("checkpoint-20", "the start", "the checkpoint it started from"):
        note = f"Trainer exited with SIGKILL at 12:03:04; restarting it (1/3) from {where} in 2 s: Error: x"
        assert bench.RESTART_FROM.search(note).group(1) == where


def test_vf_rl_notes_are_recognised(bench):
    server = [
        "Inference server exited with status -9 at 03:12:45; restarting it (1/3) in 2 s",
        "vLLM engine core of the inference server (pid 5151) made no progress for 121 s with 8 requests pending",
        "Inference server (pid 1) did not answer /vf/progress for 31 s at 03:12:45 (stopped or deadlocked)",
    ]
    trainer = [
        "Trainer exited with SIGKILL at 12:03:04; restarting it (1/3) from checkpoint-20 in 2 s",
        "Trainer rank 1 (pid 1234) made no progress for 31 s (stopped?); killed it at 12:09:40; restarting it",
    ]
    assert all(bench.SERVER_NOTE.search(s) and not bench.TRAINER_NOTE.search(s) for s in server)
    assert all(bench.TRAINER_NOTE.search(s) and not bench.SERVER_NOTE.search(s) for s in trainer)
    assert not bench.SERVER_NOTE.search("Inference server ready again after 41 s (pid 5151)")


def test_dry_run_prints_the_schedule_and_the_toml(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "chaos.py"), "--dry-run", "--minutes", "10", "--seed", "4",
         "--faults", "kill_server,stop_trainer,kill_rank", "--out", str(tmp_path / "chaos")],
        capture_output=True, text=True, timeout=120, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    text = done.stdout
    assert "schedule (s after the first logged step):" in text
    scheduled = re.findall(r"^\s+\d+\.\s+[\d.]+\s+(\w+)$", text, flags=re.M)
    assert scheduled and set(scheduled) == {"kill_server", "stop_trainer"}
    assert "not injected: kill_rank: needs --processes 2" in text
    assert 'model = "smollm2"' in text and "hang_timeout_s = 20" in text
    assert not (tmp_path / "chaos").exists()  # nothing started, nothing written
