"""vf-rl restarts a trainer that dies or stops (cli/rl/launcher.py, trainer_watch.py), with a fake
trainer that beats like the real one (training/lifecycle/heartbeat.py) and a fake server."""

from __future__ import annotations

import json
import os
import re
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.doubles.configs import RL_CONFIG as CONFIG  # noqa: E402
from tests.doubles.rl_processes import ROOT, fake_server, gone  # noqa: E402
from tests.doubles.vllm_server import free_port  # noqa: E402
from verifiers.cli.rl import launcher as rl_launcher  # noqa: E402
from verifiers.cli.rl import plan as rl_cli  # noqa: E402
from verifiers.cli.run_config import load as tc  # noqa: E402

pytestmark = pytest.mark.usefixtures(
    "one_process", "quick_restarts"
)  # tests/cli/conftest.py, tests/cli/rl/conftest.py


# Start n (1, 2, ...) records its argv tail and $VF_RL_ATTEMPT, beats like the real trainer, "trains"
# a step and saves a complete checkpoint-<n>; then, by `mode` on the first start (or every start
# for "kill-always"): SIGKILL itself, SIGSTOP itself, or hang (its liveness thread beats on, the
# loop does not). Otherwise it trains 5 more steps and exits 0.
FAKE_TRAINER = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from pathlib import Path
    from verifiers.training.lifecycle.heartbeat import start_from_env
    mode, state, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
    beat = start_from_env()
    with state.open("a") as f:
        f.write(json.dumps([sys.argv[4:], os.environ.get("VF_RL_ATTEMPT"), os.getpid()]) + "\\n")
    n = len(state.read_text().splitlines())
    beat.progress()
    print(f"Step {n}/9", flush=True)
    checkpoint = out / f"checkpoint-{n}"
    checkpoint.mkdir(parents=True)
    (checkpoint / "checkpoint_complete.json").write_text("{}")
    if mode == "kill-always" or (mode == "kill-once" and n == 1):
        print("RuntimeError: CUDA out of memory (fake)", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "stop-once" and n == 1:
        # an error handled earlier (a rollout during a server outage): not why it was killed
        print("rollout ended by an error: ServerUnreachableError: could not connect (fake)", flush=True)
        os.kill(os.getpid(), signal.SIGSTOP)
    if mode == "hang-once" and n == 1:
        time.sleep(600)
    for step in range(5):
        beat.progress()
        time.sleep(0.1)
    print("done", flush=True)
    """
)


def make_plan(tmp_path: Path, mode: str, **trainer_keys) -> rl_cli.Plan:
    port = free_port()
    raw = tc.tomllib.loads(CONFIG)
    raw["inference"]["port"] = port
    raw["trainer"].update(trainer_keys)
    raw["trainer"]["args"]["output_dir"] = str(tmp_path / "out")
    config = tc.parse_config(raw, source=tmp_path / "cfg.toml")
    script = tmp_path / "fake_trainer.py"
    script.write_text(FAKE_TRAINER)
    trainer = [sys.executable, str(script), mode, str(tmp_path / "starts.jsonl"), str(tmp_path / "out")]
    logs = tmp_path / "logs"
    return rl_cli.Plan(
        config=config,
        installs=[],
        server=rl_cli.Side(
            "inference", fake_server(tmp_path, port, lifetime=120), {}, logs / "inference.log"
        ),
        trainer=rl_cli.Side("trainer", trainer, {"PYTHONPATH": str(ROOT)}, logs / "trainer.log"),
        timeout=30.0,
    )


def starts(tmp_path: Path) -> list[list]:
    return [json.loads(line) for line in (tmp_path / "starts.jsonl").read_text().splitlines()]


def status_lines(tmp_path: Path) -> str:
    return (tmp_path / "logs" / "vf-rl.log").read_text()


def test_a_killed_trainer_is_restarted_from_its_last_checkpoint(tmp_path):
    plan = make_plan(tmp_path, "kill-once")
    launcher = rl_launcher.Launcher(plan)
    assert launcher.run() == 0
    first, second = starts(tmp_path)
    # The same command, plus the resume override (true: the trainer takes the newest checkpoint that
    # verifies, checkpoint-1 here); $VF_RL_ATTEMPT counts the attempts.
    assert first[:2] == [[], "1"] and second[:2] == [["--trainer.args.resume_from_checkpoint", "true"], "2"]
    log = status_lines(tmp_path)
    restarts = [line for line in log.splitlines() if "restarting it" in line]
    assert len(restarts) == 1, log
    assert re.fullmatch(
        r"Trainer exited with SIGKILL at \d\d:\d\d:\d\d; restarting it \(1/3\) from checkpoint-1 in 0.2 s: "
        r"RuntimeError: CUDA out of memory \(fake\)",
        restarts[0],
    ), restarts[0]
    assert "Training finished" in log
    assert gone(plan.server.proc) and gone(plan.trainer.proc)


def test_past_max_restarts_the_run_ends_with_one_line(tmp_path, capsys):
    plan = make_plan(tmp_path, "kill-always", max_restarts=1)
    assert rl_launcher.Launcher(plan).run() == 1
    assert len(starts(tmp_path)) == 2  # the first start and 1 restart
    err = capsys.readouterr().err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert re.fullmatch(
        r"error: training failed with exit status -9 \(SIGKILL\) at \d\d:\d\d:\d\d: RuntimeError: CUDA out of "
        r"memory \(fake\); not restarting it \(restarted 1 time\(s\) already, trainer.max_restarts = 1\) "
        rf"\(full log: {re.escape(str(plan.trainer.log))}\)",
        errors[0],
    ), errors[0]
    assert "restarting it (1/1) from checkpoint-1" in status_lines(tmp_path)
    assert gone(plan.server.proc)


def test_max_restarts_0_ends_the_run_at_the_first_death(tmp_path, capsys):
    plan = make_plan(tmp_path, "kill-once", max_restarts=0)
    assert rl_launcher.Launcher(plan).run() == 1
    assert len(starts(tmp_path)) == 1
    assert "not restarting it (restarts are off, trainer.max_restarts = 0)" in capsys.readouterr().err


def test_a_stopped_trainer_is_found_killed_and_restarted(tmp_path, monkeypatch):
    monkeypatch.setattr(rl_launcher, "LIVE_BOUND_S", 6.0)  # live beats every 2 s; 30 s in a real run
    plan = make_plan(tmp_path, "stop-once")
    launcher = rl_launcher.Launcher(plan)
    assert launcher.trainer_watch.live_bound_s == 6.0
    started = time.monotonic()
    assert launcher.run() == 0
    assert time.monotonic() - started < 60
    (first_argv, _, first_pid), (second_argv, attempt, _) = starts(tmp_path)
    assert attempt == "2" and second_argv[-2:] == ["--trainer.args.resume_from_checkpoint", "true"]
    line = re.search(
        r"Trainer rank 0 \(pid (\d+)\) made no progress for (\d+) s \(stopped\?\); killed it at \d\d:\d\d:\d\d; "
        r"restarting it \(1/3\) from checkpoint-1 in 0.2 s\n",  # no error of its log quoted: it was killed
        status_lines(tmp_path),
    )
    assert line and int(line.group(1)) == first_pid, status_lines(tmp_path)
    assert 6 <= int(line.group(2)) <= 20


def test_a_trainer_stuck_in_a_step_is_found_by_hang_timeout_s(tmp_path):
    plan = make_plan(tmp_path, "hang-once", hang_timeout_s=3)
    assert rl_launcher.Launcher(plan).run() == 0
    assert len(starts(tmp_path)) == 2
    assert re.search(
        r"Trainer rank 0 \(pid \d+\) made no progress for \d+ s \(hung in a step\?\); killed it at "
        r"\d\d:\d\d:\d\d; restarting it \(1/3\) from checkpoint-1",
        status_lines(tmp_path),
    ), status_lines(tmp_path)


def test_the_first_start_failing_before_training_is_not_restarted(tmp_path, capsys):
    """A start-up error repeats: the run ends as before, with the trainer's exit status."""
    plan = make_plan(tmp_path, "unused")
    plan.trainer.cmd = [sys.executable, "-c", "import sys; print('ValueError: bad config'); sys.exit(3)"]
    launcher = rl_launcher.Launcher(plan)
    launcher.trainer_cmd = list(plan.trainer.cmd)
    assert launcher.run() == 3
    assert (
        f"error: training failed with exit status 3 (full log: {plan.trainer.log})" in capsys.readouterr().err
    )
    assert "restarting" not in status_lines(tmp_path)


def test_the_restart_override_wins_over_the_users_resume(tmp_path):
    """A user's --trainer.args.resume_from_checkpoint comes first; the restart's, appended, wins."""
    for n in (1, 2):
        folder = tmp_path / "out" / f"checkpoint-{n}"
        folder.mkdir(parents=True)
        (folder / "checkpoint_complete.json").write_text("{}")
    cfg = tmp_path / "cfg.toml"
    cfg.write_text(CONFIG)
    argv = ["@", str(cfg), "--trainer.args.output_dir", str(tmp_path / "out")]
    argv += ["--trainer.args.resume_from_checkpoint", str(tmp_path / "out" / "checkpoint-1")]
    argv += ["--trainer.args.resume_from_checkpoint", str(tmp_path / "out" / "checkpoint-2")]
    cli = tc.parse_command_line(argv, "vf-train", {}, "")
    config = tc.load_config(cli.configs, cli.overrides, environ={})
    assert config.trainer.resume_from_checkpoint == str(tmp_path / "out" / "checkpoint-2")
    assert os.fspath(config.output_dir) == str(tmp_path / "out")


# -- a real run: the trainer killed mid-training --------------------------------------------------


@pytest.mark.server
@pytest.mark.slow
def test_vf_rl_run_survives_its_trainer_killed_mid_run(tiny_model_dir, tmp_path):
    """kill -9 of the trainer after its checkpoint-2: vf-rl restarts it from there against the same
    server, and every step is in metrics.jsonl, a step logged twice marked redone."""
    pytest.importorskip("vllm")
    import signal

    from tests.doubles.real_rl_run import start_real_run, step_lines
    from tests.doubles.rl_processes import wait_for

    steps = 5
    child, run = start_real_run(tiny_model_dir, tmp_path, steps)
    logs = run / "logs"
    try:
        wait_for(lambda: (run / "checkpoint-2" / "checkpoint_complete.json").exists(), 600)
        pid = int((logs / "heartbeats" / "rank0.live").read_text())
        os.kill(pid, signal.SIGKILL)
        out, _ = child.communicate(timeout=600)
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)  # vf-rl stops its children
            child.communicate(timeout=60)
    assert child.returncode == 0, out[-5000:]
    status = (logs / "vf-rl.log").read_text()
    assert re.search(
        r"Trainer exited with SIGKILL at [\d:]+; restarting it \(1/3\) from checkpoint-\d+", status
    ), status
    assert "Inference server exited" not in status  # the server kept running
    steps_run = step_lines(run)
    assert sorted({r["step"] for r in steps_run}) == list(range(1, steps + 1)), steps_run
    seen: set[int] = set()
    for r in steps_run:  # a step's second line is marked redone, and only that one
        assert r.get("redone", False) == (r["step"] in seen), steps_run
        seen.add(r["step"])
    assert any(r.get("attempt") == 2 for r in steps_run)
