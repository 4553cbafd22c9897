"""SIGINT / SIGTERM stop a run cleanly (issue 15, item 3; the contract in verifiers/training/lifecycle/shutdown.py).

In-process against the fake server: a signal during a step finishes that step, saves it
(even with ``save_strategy="no"``) and raises ``TrainingStopped`` (exit status 143 / 130);
a signal while the trainer waits for a batch stops the wait at once, trains nothing more,
and saves the batch being generated as never started. The previous handlers come back
after ``train()``. With a real server and separate processes (exit statuses, resuming
exactly, a second signal): tests/training/lifecycle/test_resume_kill.py.
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("datasets")

from transformers import TrainerCallback  # noqa: E402

from tests.doubles.openai_server import FakeServer  # noqa: E402
from tests.doubles.trainer import RecordingClient, grpo_args, make_trainer, reply_of, train_log  # noqa: E402
from verifiers.errors import TrainingStopped  # noqa: E402
from verifiers.training.lifecycle import checkpoint as ckpt  # noqa: E402
from verifiers.training.lifecycle.shutdown import StopSignals  # noqa: E402


class SlowAfter:
    """The fake server's replies, delayed by ``delay`` seconds once ``slow`` is set."""

    def __init__(self, delay: float):
        self.delay, self.slow = delay, threading.Event()

    def __call__(self, request: dict):
        text = reply_of(request)
        return {"content": text, "delay": self.delay} if self.slow.is_set() else text


@pytest.fixture(scope="module")
def slow_server():
    reply = SlowAfter(delay=20.0)
    with FakeServer(reply=reply) as server:
        yield server, reply


class SignalAt(TrainerCallback):
    """Sends ``signum`` to this process at the start of step ``step`` (0-based: before it trains)."""

    def __init__(self, signum: int, step: int, delay: float = 0.0):
        self.signum, self.step, self.delay = signum, step, delay
        self.sent_at: float | None = None

    def _send(self):
        self.sent_at = time.monotonic()
        signal.raise_signal(self.signum)

    def on_step_begin(self, args, state, control, **kwargs):
        if state.global_step == self.step and self.sent_at is None:
            self._send()


def test_sigterm_during_a_step_finishes_it_saves_it_and_exits_143(
    tiny_model_dir, slow_server, tmp_path, capfd
):
    server, _ = slow_server
    args = grpo_args(
        tmp_path, max_steps=4, num_batches_ahead=1, cpu_phases="overlap", save_only_model=False
    )  # save_strategy="no"
    trainer = make_trainer(tiny_model_dir, RecordingClient(server), args)
    trainer.add_callback(SignalAt(signal.SIGTERM, step=1))  # arrives while step 2 trains
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(TrainingStopped) as info:
        trainer.train()
    out = Path(args.output_dir)
    assert info.value.code == 143 and info.value.step == 2
    assert info.value.checkpoint == str(out / "checkpoint-2")
    assert [h["step"] for h in train_log(trainer)] == [1, 2]  # step 2 finished, nothing after
    assert [p.name for _, p in ckpt.checkpoints(out)] == ["checkpoint-2"] and ckpt.is_complete(
        out / "checkpoint-2"
    )
    assert ckpt.has_optimizer_state(out / "checkpoint-2")
    err = capfd.readouterr().err
    assert "SIGTERM received: stopping after the current step" in err
    assert f"Stopped by SIGTERM after step 2/4; checkpoint saved to {out}/checkpoint-2 (resume with " in err
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored
    assert trainer.generator is None

    resumed = make_trainer(tiny_model_dir, RecordingClient(server), args)
    resumed.train(resume_from_checkpoint=True)
    assert [h["step"] for h in train_log(resumed)][-2:] == [3, 4]


def test_sigint_while_waiting_for_a_batch_stops_the_wait_and_exits_130(
    tiny_model_dir, slow_server, tmp_path, capfd
):
    server, reply = slow_server
    args = grpo_args(tmp_path, max_steps=4, num_batches_ahead=0, save_only_model=False)
    trainer = make_trainer(tiny_model_dir, RecordingClient(server), args)

    class SlowThenSignal(TrainerCallback):
        """After step 1 every request takes 20 s; SIGINT comes 1 s into the wait for batch 1."""

        def on_optimizer_step(self, args, state, control, **kwargs):
            # Before on_step_end, where the next batch starts (num_batches_ahead=0): it is slow.
            if state.global_step == 0:
                reply.slow.set()
                main = threading.main_thread().ident
                threading.Timer(1.0, lambda: signal.pthread_kill(main, signal.SIGINT)).start()

    trainer.add_callback(SlowThenSignal())
    t0 = time.monotonic()
    try:
        with pytest.raises(TrainingStopped) as info:
            trainer.train()
    finally:
        reply.slow.clear()
    assert time.monotonic() - t0 < 18, "it waited for the slow batch"
    out = Path(args.output_dir)
    assert info.value.code == 130 and info.value.step == 1
    assert ckpt.is_complete(out / "checkpoint-1")
    # The batch being generated is saved as never started: a resume generates it again.
    state = ckpt.load_generator_state(out / "checkpoint-1")
    assert state["trained"] == 1 and state["next"] == 1 and state["pending"] == []
    assert "Stopped by SIGINT after step 1/4; checkpoint saved to" in capfd.readouterr().err


def test_sigterm_while_waiting_for_a_lost_server_in_a_sync_stops_the_wait(
    tiny_model_dir, slow_server, tmp_path, capfd
):
    from verifiers.errors import ServerUnreachableError

    server, _ = slow_server

    class LosesTheServer(RecordingClient):
        lost = False

        def update_weights(self, named_tensors, **kw):
            if self.lost:
                raise ServerUnreachableError("connection refused")
            return super().update_weights(named_tensors, **kw)

        def wait_for_server(self, timeout):
            time.sleep(30)  # the server never comes back within the test
            raise ServerUnreachableError("not back")

    client = LosesTheServer(server)

    class LoseItAfterStep2(TrainerCallback):
        def on_optimizer_step(self, args, state, control, **kwargs):
            if state.global_step == 1:  # step 2's optimizer step is done; its weight sync comes next
                client.lost = True
                main = threading.main_thread().ident
                threading.Timer(1.0, lambda: signal.pthread_kill(main, signal.SIGTERM)).start()

    args = grpo_args(tmp_path, max_steps=4, num_batches_ahead=1, cpu_phases="overlap", save_only_model=False)
    trainer = make_trainer(tiny_model_dir, client, args)
    trainer.add_callback(LoseItAfterStep2())
    t0 = time.monotonic()
    with pytest.raises(TrainingStopped) as info:
        trainer.train()
    assert time.monotonic() - t0 < 25, "it waited for the server"
    out = Path(args.output_dir)
    assert info.value.code == 143 and info.value.step == 2 and ckpt.is_complete(out / "checkpoint-2")
    assert "Stopped by SIGTERM after step 2/4" in capfd.readouterr().err


def test_a_signal_echoed_within_a_second_is_the_same_signal(monkeypatch):
    exits = []
    monkeypatch.setattr("os._exit", exits.append)
    woken = []
    stop = StopSignals(announce=False, on_first=lambda: woken.append(1))
    assert stop.install()
    try:
        signal.raise_signal(signal.SIGTERM)
        signal.raise_signal(signal.SIGTERM)  # a launcher forwarding the same signal: ignored
        assert stop.signum == signal.SIGTERM and woken == [1] and exits == []
        stop._first_at -= 2.0  # a second signal, later: out at once
        signal.raise_signal(signal.SIGINT)
        assert exits == [130]
    finally:
        stop.restore()


def test_vf_train_exits_with_the_signal_status():
    # vf-train (and vf-rl's trainer, which runs it) return what run_cli makes of TrainingStopped.
    from verifiers.cli.common import run_cli

    def stopped(argv):
        raise TrainingStopped(signal.SIGTERM, 3, "out/checkpoint-3")

    assert run_cli(stopped, []) == 143
    assert TrainingStopped(signal.SIGINT, 3, None).code == 130


def test_handlers_are_installed_only_in_the_main_thread():
    result = []
    t = threading.Thread(target=lambda: result.append(StopSignals().install()))
    t.start()
    t.join()
    assert result == [False]


# ---------------------------------------------------------------------------
# Two processes (accelerate launch, DDP over gloo): every rank stops at the same step

DIST_STEPS = 40


@pytest.mark.slow  # two training processes started by accelerate: ~1 min on 2 busy cores
def test_sigterm_to_a_two_process_run_stops_every_rank_at_the_same_step(tiny_model_dir, tmp_path):
    import os
    import re
    import subprocess

    from tests.doubles import launch
    from tests.doubles import openai_server as fakeserver
    from tests.drivers.dist_train import fake_reply

    root = Path(__file__).resolve().parents[3]
    prefix, launch_env = launch.command("ddp")  # accelerate launch, 2 processes on CPU
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false", **launch_env}
    out, log = tmp_path / "run", tmp_path / "run.log"
    cmd = [*prefix, str(root / "tests" / "drivers" / "dist_train.py"),
           "--out", str(out), "--model", str(tiny_model_dir), "--steps", str(DIST_STEPS)]  # fmt: skip
    with fakeserver.fake_server(reply=fake_reply) as server:
        with open(log, "ab") as fh:
            # Its own process group, signalled as a whole: what a terminal's Ctrl-C and vf-rl do.
            proc = subprocess.Popen(cmd + ["--fake", server.url], cwd=root, env=env, stdout=fh,
                                    stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        try:
            deadline = time.monotonic() + 300
            while proc.poll() is None and time.monotonic() < deadline:
                if re.search(r"Step [1-9]\d*/|'loss'", log.read_text(errors="replace")):
                    break
                time.sleep(0.1)
            os.killpg(proc.pid, signal.SIGTERM)
            rc = proc.wait(120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
    text = log.read_text(errors="replace")
    print(f"launcher exit {rc}", *[line for line in text.splitlines() if "SIGTERM" in line], sep="\n")
    stopped = re.findall(r"Stopped by SIGTERM after step (\d+)/(\d+); checkpoint saved to (\S+) ", text)
    assert len(stopped) == 1, text[-4000:]  # one line, from the main process
    k, total, folder = int(stopped[0][0]), int(stopped[0][1]), Path(stopped[0][2])
    assert 1 <= k < total == DIST_STEPS and folder == out / "trainer" / f"checkpoint-{k}"
    assert ckpt.is_complete(folder)
    assert all((folder / f"rng_state_{r}.pth").is_file() for r in (0, 1))  # both ranks saved
    assert "Stopped at once" not in text  # the launcher's echo of the same signal is not a second one
    assert text.count("SIGTERM received: stopping after the current step") == 1  # the main process's
    # The workers end cleanly; the launcher itself (torchrun's agent) re-raises the signal as
    # SignalException and exits 1, which is its own way (vf-rl exits with the signal's status).
    assert not re.search(r'File "[^"]*(verifiers/|dist_train\.py)', text), text[-4000:]
    assert rc != 0
