"""Exact resume: a run killed at any moment continues as if it had never stopped.

- Checkpoint completeness without training (resuming picks the last complete checkpoint,
  rotation keeps it): tests/training/lifecycle/test_checkpoint.py.
- A run that dies while saving (fake server): the half-written checkpoint is
  skipped and the next step's loss equals an uninterrupted run's. A checkpoint
  truncated after it was marked is skipped the same way, in one line
  (test_checkpoint_verify.py: the other kinds of damage, on folders alone).
- SIGKILL against a real vf-vllm server (``-m server``): ``resume_run.py`` in a
  subprocess, one batch ahead, a checkpoint every step. Run A trains N steps;
  run B is SIGKILLed once checkpoint-2 is complete, then resumed in a new process.
  Every step after the checkpoint matches A (loss within 1e-6, same reward and
  gradient norm), and B's trained rollouts, in order, are A's: none lost, none
  trained twice.
- SIGTERM the same way (verifiers/training/lifecycle/shutdown.py): run B exits 143 after
  finishing and saving the step in progress, says so in one line, and resumes to
  match A. A second SIGINT 1.5 s after the first, during a long step, exits 130 at
  once with no new checkpoint. (In-process signal tests: test_signals.py.)
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("datasets")

from tests.doubles.launch import finish  # noqa: E402
from tests.doubles.trainer import (  # noqa: E402
    RecordingClient,
    grpo_args,
    make_trainer,
    train_log,
)
from tests.doubles.vllm_server import serve  # noqa: E402
from verifiers.training.lifecycle import checkpoint as ckpt  # noqa: E402

ROOT = Path(__file__).resolve().parents[3]


# ---------------------------------------------------------------------------
# A run that dies while saving (fake server)


class KilledWhileSaving(BaseException):
    """Not an Exception: nothing on the way up may treat it as handled."""


def test_run_killed_while_saving_resumes_from_the_previous_checkpoint(
    tiny_model_dir, fake_server, tmp_path, monkeypatch
):
    # save_total_limit=1: Trainer alone would delete checkpoint-1 before checkpoint-2 is whole.
    common = dict(
        max_steps=2,
        num_batches_ahead=1,
        cpu_phases="overlap",
        save_strategy="steps",
        save_steps=1,
        save_only_model=False,
        save_total_limit=1,
    )
    full = make_trainer(tiny_model_dir, RecordingClient(fake_server), grpo_args(tmp_path / "a", **common))
    full.train()

    args = grpo_args(tmp_path / "b", **common)
    killed = make_trainer(tiny_model_dir, RecordingClient(fake_server), args)
    save_generator_state = ckpt.save_generator_state

    def dies_at_step_2(folder, state):
        if folder.endswith("checkpoint-2"):
            raise KilledWhileSaving  # after the model and optimizer, before the generator state
        save_generator_state(folder, state)

    monkeypatch.setattr(ckpt, "save_generator_state", dies_at_step_2)
    with pytest.raises(KilledWhileSaving):
        killed.train()
    monkeypatch.undo()
    out = Path(args.output_dir)
    assert [p.name for _, p in ckpt.checkpoints(out)] == ["checkpoint-1", "checkpoint-2"]
    assert (out / "checkpoint-2" / "optimizer.pt").is_file() and not ckpt.is_complete(out / "checkpoint-2")

    resumed = make_trainer(tiny_model_dir, RecordingClient(fake_server), args)
    resumed.train(resume_from_checkpoint=True)
    assert (out / "incomplete-checkpoint-2").is_dir() and ckpt.is_complete(out / "checkpoint-2")
    assert [p.name for _, p in ckpt.checkpoints(out)] == ["checkpoint-2"]  # save_total_limit=1, after
    a = train_log(full)[-1]
    b = train_log(resumed)  # step 1 comes back from checkpoint-1's trainer_state.json
    assert [h["step"] for h in b] == [1, 2] and a["step"] == 2
    print("step 2 loss", a["loss"], b[1]["loss"])
    # The fake server's log-probs are not the model's: tiny losses, so compare relatively.
    assert b[1]["loss"] == pytest.approx(a["loss"], rel=1e-6) and b[1]["reward"] == a["reward"]
    assert b[1]["grad_norm"] == pytest.approx(a["grad_norm"], rel=1e-6)


def test_a_truncated_checkpoint_is_skipped_and_the_run_resumes_from_the_one_before(
    tiny_model_dir, fake_server, tmp_path, caplog
):
    # The weights of checkpoint-2 lose their second half after the mark (a bad copy, a half-synced
    # file system): before, Trainer failed deep inside safetensors; now one line, checkpoint-1.
    args = grpo_args(
        tmp_path, max_steps=2, num_batches_ahead=1, save_strategy="steps", save_steps=1, save_only_model=False
    )
    make_trainer(tiny_model_dir, RecordingClient(fake_server), args).train()
    out = Path(args.output_dir)
    weights = out / "checkpoint-2" / "model.safetensors"
    with open(weights, "r+b") as fh:
        fh.truncate(weights.stat().st_size // 2)

    resumed = make_trainer(tiny_model_dir, RecordingClient(fake_server), args)
    with caplog.at_level("WARNING", logger="verifiers.training.lifecycle.checkpoint"):
        resumed.train(resume_from_checkpoint=True)
    [line] = [r.getMessage() for r in caplog.records if " is corrupt (" in r.getMessage()]
    assert line.startswith("checkpoint-2 is corrupt (model.safetensors: ")
    assert line.endswith("moved to corrupt-checkpoint-2; resuming from checkpoint-1")
    assert [h["step"] for h in train_log(resumed)] == [1, 2]  # step 1 from checkpoint-1, step 2 trained again
    assert ckpt.verify(out / "checkpoint-2") is None and (out / "corrupt-checkpoint-2").is_dir()


# ---------------------------------------------------------------------------
# SIGKILL against a real vf-vllm server

STEPS, KILL_AFTER = 4, 2


@pytest.fixture(scope="module")
def vllm_port(tiny_model_dir, tmp_path_factory):
    """A vf-vllm server of the tiny model for this module; yields its port."""
    flags = ("--max-num-seqs", "32", "--no-enable-chunked-prefill", "--seed", "0")
    with serve(tiny_model_dir, tmp_path_factory.mktemp("resume-vllm"), *flags) as server:
        yield server.port


def start_run(
    run: Path, port: int, model: Path, resume: bool = False, pause: tuple[int, float] | None = None
) -> subprocess.Popen:
    cmd = [
        sys.executable, "-m", "tests.drivers.resume_run", "--port", str(port), "--model", str(model),
        "--out", str(run / "out"), "--metrics", str(run / "metrics.jsonl"), "--steps", str(STEPS),
    ] + (["--resume"] if resume else [])  # fmt: skip
    if pause:
        cmd += ["--pause-before-step", str(pause[0]), "--pause-s", str(pause[1])]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(ROOT)}
    with open(run / ("resumed.log" if resume else "run.log"), "ab") as log:  # the child keeps its copy
        return subprocess.Popen(
            cmd, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
        )


def staging_files(pid: int) -> list[Path]:
    """The weight-transfer files (a model's size each, in /dev/shm) that process ``pid`` made."""
    return [p for d in (Path("/dev/shm"), Path(tempfile.gettempdir())) for p in d.glob(f"vf-weights-{pid}-*")]


def read_steps(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.fixture(scope="module")
def uninterrupted(tiny_model_dir, vllm_port, tmp_path_factory) -> list[dict]:
    """Run A: the steps of an uninterrupted run, which every interrupted-and-resumed run must match."""
    run_a = tmp_path_factory.mktemp("uninterrupted")
    finish(start_run(run_a, vllm_port, tiny_model_dir), run_a)
    a = read_steps(run_a / "metrics.jsonl")
    assert [s["step"] for s in a] == list(range(1, STEPS + 1))
    return a


def wait_for_checkpoint(proc: subprocess.Popen, out: Path, step: int) -> None:
    mark = out / f"checkpoint-{step}" / ckpt.COMPLETE_FILE
    deadline = time.monotonic() + 300
    while not mark.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)


def resume_and_compare(
    run_b: Path, port: int, model: Path, a: list[dict], before: list[dict], k: int
) -> None:
    """Resume run B from checkpoint-``k`` in a new process; every step must match run A's."""
    # The server now holds the stopped run's latest weights; put others there so that a resumed
    # run that generated before pushing its checkpoint's weights would sample different rollouts.
    from transformers import AutoModelForCausalLM

    from verifiers.inference.client.vllm_client import VLLMClient

    base = AutoModelForCausalLM.from_pretrained(str(model), dtype=torch.float32)
    client = VLLMClient(f"http://127.0.0.1:{port}", request_timeout=60)
    try:
        client.update_weights(list(base.named_parameters()))
    finally:
        client.close()

    (run_b / "metrics.jsonl").rename(run_b / "stopped.jsonl")
    finish(start_run(run_b, port, model, resume=True), run_b)
    resumed = read_steps(run_b / "metrics.jsonl")
    assert [s["step"] for s in resumed] == list(range(k + 1, STEPS + 1))
    b = [s for s in before if s["step"] <= k] + resumed
    assert [s["step"] for s in b] == list(range(1, STEPS + 1))

    gaps = [abs(x["loss"] - y["loss"]) for x, y in zip(a, b, strict=True)]
    print("per-step |loss A - loss B|:", gaps)
    for x, y in zip(a, b, strict=True):
        assert abs(x["loss"] - y["loss"]) <= 1e-6, (x["step"], x["loss"], y["loss"])
        assert x["reward"] == y["reward"], (x["step"], x["reward"], y["reward"])
        assert x["grad_norm"] == pytest.approx(y["grad_norm"], rel=1e-5), x["step"]
    assert any(abs(x["loss"]) > 1e-6 for x in a[k:])  # the losses compared are not all ~0

    rollouts_a = [r for s in a for r in s["rollouts"]]
    rollouts_b = [r for s in b for r in s["rollouts"]]
    assert len(rollouts_a) == STEPS * 8 and len(set(rollouts_a)) == len(rollouts_a)
    assert rollouts_b == rollouts_a  # same rollouts, same order: none lost, none trained twice


@pytest.mark.server
@pytest.mark.slow  # a server and three training processes: ~2.5 min on 2 busy cores
def test_sigkill_then_resume_matches_an_uninterrupted_run(tiny_model_dir, vllm_port, uninterrupted, tmp_path):
    # Run B: SIGKILL as soon as checkpoint-KILL_AFTER is complete (the run is then somewhere in
    # the next step: generating, training, syncing or saving).
    run_b = tmp_path / "b"
    run_b.mkdir()
    out_b = run_b / "out"
    proc = start_run(run_b, vllm_port, tiny_model_dir)
    wait_for_checkpoint(proc, out_b, KILL_AFTER)
    os.killpg(proc.pid, signal.SIGKILL)
    assert proc.wait(10) == -signal.SIGKILL, "the run ended before it was killed"
    resume_from = ckpt.last_complete_checkpoint(out_b)
    assert resume_from is not None
    k = int(Path(resume_from).name.split("-")[1])
    assert KILL_AFTER <= k < STEPS
    before_kill = read_steps(run_b / "metrics.jsonl")
    print(
        f"killed after checkpoint-{KILL_AFTER}: steps logged {[s['step'] for s in before_kill]}, "
        f"folders {[p.name for _, p in ckpt.checkpoints(out_b)]}, resuming from checkpoint-{k}"
    )
    resume_and_compare(run_b, vllm_port, tiny_model_dir, uninterrupted, before_kill, k)


@pytest.mark.server
@pytest.mark.slow  # with the SIGKILL test's server and run A: two more training processes
def test_sigterm_exits_143_after_saving_the_step_and_resumes_exactly(
    tiny_model_dir, vllm_port, uninterrupted, tmp_path
):
    run_b = tmp_path / "b"
    run_b.mkdir()
    out_b = run_b / "out"
    proc = start_run(run_b, vllm_port, tiny_model_dir)
    wait_for_checkpoint(proc, out_b, KILL_AFTER)
    os.kill(proc.pid, signal.SIGTERM)  # somewhere in step KILL_AFTER + 1 (or the save after step 2)
    assert proc.wait(120) == 143
    log = (run_b / "run.log").read_text(errors="replace")
    before = read_steps(run_b / "metrics.jsonl")
    k = before[-1]["step"]  # the last step trained is the one saved: nothing lost, nothing after it
    assert KILL_AFTER <= k < STEPS
    assert ckpt.last_complete_checkpoint(out_b) == str(out_b / f"checkpoint-{k}")
    line = (
        f"Stopped by SIGTERM after step {k}/{STEPS}; checkpoint saved to {out_b}/checkpoint-{k} (resume with"
    )
    assert line in log, log[-3000:]
    resume_and_compare(run_b, vllm_port, tiny_model_dir, uninterrupted, before, k)


@pytest.mark.server
@pytest.mark.slow
def test_a_second_signal_exits_at_once_without_a_checkpoint(tiny_model_dir, vllm_port, tmp_path):
    run = tmp_path / "c"
    run.mkdir()
    out = run / "out"
    proc = start_run(run, vllm_port, tiny_model_dir, pause=(KILL_AFTER + 1, 60.0))
    wait_for_checkpoint(proc, out, KILL_AFTER)
    time.sleep(0.5)  # in the long step now
    os.kill(proc.pid, signal.SIGINT)
    time.sleep(1.5)  # past the echo window
    assert staging_files(proc.pid) != []  # its weight-transfer file (synced after each step)
    second = time.monotonic()
    os.kill(proc.pid, signal.SIGINT)
    assert proc.wait(30) == 130
    assert time.monotonic() - second < 5  # at once: not after the 60 s step
    log = (run / "run.log").read_text(errors="replace")
    assert (
        "SIGINT received: stopping after the current step" in log
        and "Stopped at once by a second SIGINT" in log
    )
    assert ckpt.last_complete_checkpoint(out) == str(out / f"checkpoint-{KILL_AFTER}")
    assert not (out / f"checkpoint-{KILL_AFTER + 1}").exists()
    assert staging_files(proc.pid) == []  # os._exit runs no finalizer: removed before it
