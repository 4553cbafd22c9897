"""The training stages' interfaces (issue 24): data flows forward, lifecycle takes what it needs.

- ``batches_trained`` / ``scores_needed``: the trained-batch count and which log-probs a batch
  needs, each computed in one place.
- ``prepare_batch``: the batch stage returns unscored micro-batches; scoring is the trainer's.
- ``RolloutProducer`` tokenizes its own batches from a tokenizer and ``TokenSettings``.
- ``save_checkpoint(CheckpointSave)`` / ``conclude`` / ``StopAtStepEnd``: driven by small
  doubles (a one-process accelerator, recording callables), no trainer; lifecycle/ never
  imports trainer.py.
"""

from __future__ import annotations

import ast
import asyncio
import dataclasses
import errno
import gc
import os
import signal
import weakref
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.doubles.generation import DATASET, FakeEnv  # noqa: E402
from verifiers.errors import CheckpointError, ConfigError, TrainingStopped  # noqa: E402
from verifiers.training.batch.prepared import (  # noqa: E402
    PreparedBatch,
    batches_trained,
    prepare_batch,
    scores_needed,
)
from verifiers.training.batch.tensors import build_train_batch  # noqa: E402
from verifiers.training.generation.producer import (  # noqa: E402
    GeneratedBatch,
    PromptStream,
    RolloutProducer,
    TokenSettings,
)
from verifiers.training.lifecycle import checkpoint as ckpt  # noqa: E402
from verifiers.training.lifecycle.checkpoint_save import CheckpointSave, save_checkpoint  # noqa: E402
from verifiers.training.lifecycle.shutdown import StopAtStepEnd, StopSignals, conclude  # noqa: E402
from verifiers.types import GenerateOutputs, ProcessedOutputs  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


# ---- pure functions ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "step, accumulation, per_batch, expected",
    [
        (0, 2, 2, (0, False)),
        (3, 2, 2, (3, False)),  # one batch per optimizer step
        (1, 2, 4, (0, True)),  # num_iterations=2: a batch spans two steps
        (2, 2, 4, (1, False)),
        (5, 2, 4, (2, True)),
    ],
)
def test_batches_trained_counts_whole_batches_and_says_when_a_step_ends_inside_one(
    step, accumulation, per_batch, expected
):
    assert batches_trained(step, accumulation, per_batch) == expected


def test_scores_needed_names_old_logprobs_only_when_the_policy_moves_within_a_batch():
    one_step = dict(num_iterations=1, micro_steps=2, gradient_accumulation_steps=2)
    assert scores_needed(**one_step, beta=0.0) == (False, False)
    assert scores_needed(**one_step, beta=0.1) == (False, True)
    assert scores_needed(num_iterations=2, micro_steps=2, gradient_accumulation_steps=2, beta=0.0) == (
        True,
        False,
    )
    # a generation batch of two optimizer steps
    assert scores_needed(num_iterations=1, micro_steps=4, gradient_accumulation_steps=2, beta=0.0) == (
        True,
        False,
    )


# ---- batch stage ------------------------------------------------------------------------------
def _generated(n: int = 4) -> GeneratedBatch:
    processed = ProcessedOutputs(
        prompt_ids=[[1, 2, 3]] * n,
        prompt_mask=[[1, 1, 1]] * n,
        completion_ids=[[10 + k, 20 + k] for k in range(n)],
        completion_mask=[[1, 1]] * n,
        completion_logprobs=[[-0.5, -0.25]] * n,
        rewards=[float(k) for k in range(n)],
    )
    outputs = GenerateOutputs(
        prompt=["p"] * n, completion=[f"c{k}" for k in range(n)], answer=[""] * n, state=[{}] * n,
        info=[{}] * n, task=["default"] * n, reward=[float(k) for k in range(n)], metrics={},
    )  # fmt: skip
    return GeneratedBatch(3, 2, 2, outputs, processed, 0.0)


def test_prepare_batch_returns_this_process_micro_batches_unscored():
    batch = _generated()
    train = build_train_batch(batch.processed, [1.0, -1.0, 0.5, -0.5], pad_id=0)
    args = dict(micro_steps=2, gradient_accumulation_steps=2, loss_type="dr_grpo", num_processes=2)
    first, second = (prepare_batch(batch, train, **args, process_index=p) for p in (0, 1))
    assert isinstance(first, PreparedBatch) and first.index == 3 and len(first.micro) == 2
    # process 1 takes the second half of the rows, one row per micro-batch
    assert [m["input_ids_BT"][:, 3].tolist() for m in second.micro] == [[12], [13]]
    assert [m["advantages_B"].tolist() for m in first.micro] == [[1.0], [-1.0]]
    for micro in first.micro + second.micro:
        assert "old_logprobs_BT" not in micro and "ref_logprobs_BT" not in micro  # the trainer scores
    assert first.step_counts == second.step_counts  # every process counts every process's share
    assert len(first.rollout_ids) == 4 and first.rollout_ids[0].startswith("3.0:")


# ---- generation stage -------------------------------------------------------------------------
class TokenizingEnv(FakeEnv):
    """Records what ``process_env_results`` was given; every completion is 5 tokens."""

    def __init__(self):
        super().__init__()
        self.processed_with: list[tuple] = []

    def process_env_results(self, prompts, completions, states, rewards, processing_class, **kw):
        self.processed_with.append((processing_class, kw))
        n = len(prompts)
        return ProcessedOutputs(
            prompt_ids=[[1]] * n, prompt_mask=[[1]] * n, completion_ids=[[5] * 5 for _ in range(n)],
            completion_mask=[[1] * 5 for _ in range(n)], completion_logprobs=[[-0.1] * 5 for _ in range(n)],
            rewards=list(rewards), is_truncated=[False] * n,
        )  # fmt: skip


def _producer(env, **kw) -> RolloutProducer:
    return RolloutProducer(
        env,
        None,
        "m",
        DATASET,
        PromptStream(len(DATASET), shuffle=False),
        num_prompts=2,
        num_generations=2,
        **kw,
    )


def test_producer_tokenizes_its_batches_with_the_settings_it_was_given():
    env, tokenizer = TokenizingEnv(), object()
    settings = TokenSettings(
        max_seq_len=64, max_completion_length=3, mask_env_responses=False,
        mask_truncated_completions=True, zero_truncated_completions=True,
    )  # fmt: skip
    batch = asyncio.run(_producer(env, tokenizer=tokenizer, tokens=settings).produce(0, 0))
    ((given, kw),) = env.processed_with
    assert given is tokenizer
    assert kw == dict(
        max_seq_len=64,
        mask_env_responses=False,
        mask_truncated_completions=True,
        zero_truncated_completions=True,
    )
    p = batch.processed  # then cut to max_completion_length, in the generator thread
    assert [len(ids) for ids in p.completion_ids] == [3] * 4 and all(p.is_truncated)
    assert p.completion_mask == [[0] * 3] * 4 and p.rewards == [0.0] * 4


def test_producer_without_a_tokenizer_makes_no_token_data_and_refuses_half_a_pair():
    env = TokenizingEnv()
    assert asyncio.run(_producer(env).produce(0, 0)).processed is None and not env.processed_with
    with pytest.raises(ConfigError, match="only one of tokenizer and tokens"):
        _producer(env, tokenizer=object())


# ---- lifecycle --------------------------------------------------------------------------------
class OneProcess:
    """accelerate's Accelerator as the lifecycle sees it, for one process."""

    num_processes, process_index, is_main_process = 1, 0, True


def _save(tmp_path, calls, *, step=2, limit=1, trainer_files=None, prepared=None) -> CheckpointSave:
    def files():
        calls.append("trainer_files")
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "model.safetensors").write_bytes(b"w")

    return CheckpointSave(
        accelerator=OneProcess(), device="cpu", run_dir=str(tmp_path), step=step, should_save=True,
        save_total_limit=limit, keep=lambda: None, trainer_files=trainer_files or files, prepared=prepared,
        generator_state=lambda: calls.append("generator_state") or {"trained": 1, "next": 2, "producer": {}, "pending": []},
        plot=lambda *folders: calls.append(("plot", *folders)),
    )  # fmt: skip


def test_save_checkpoint_writes_every_part_then_marks_then_rotates(tmp_path):
    calls = []
    save_checkpoint(_save(tmp_path, calls, step=1))
    prepared = PreparedBatch(0, [{"start": 1}], [2.0], ["0.0:x"])
    save_checkpoint(_save(tmp_path, calls, step=2, prepared=prepared))
    assert calls[:3] == ["trainer_files", "generator_state",
                         ("plot", str(tmp_path / "checkpoint-1"), str(tmp_path))]  # fmt: skip
    # save_total_limit=1: checkpoint-1 went only after checkpoint-2 was marked complete
    assert [p.name for _, p in ckpt.checkpoints(tmp_path)] == ["checkpoint-2"]
    assert ckpt.is_complete(tmp_path / "checkpoint-2")
    assert ckpt.load_prepared_batch(tmp_path / "checkpoint-2", 0).rollout_ids == ["0.0:x"]
    assert ckpt.load_generator_state(tmp_path / "checkpoint-2")["next"] == 2


def test_save_checkpoint_frees_what_the_save_left_in_reference_cycles(tmp_path):
    # The curves figure is ~15,000 objects in cycles; freed by the save, not by the collector's next
    # full pass (which the disabled collector here never makes).
    class Node:
        pass

    left = []

    def plot(*folders):
        node = Node()
        node.self = node  # a cycle, as matplotlib's artists and transforms make
        left.append(weakref.ref(node))

    save = dataclasses.replace(_save(tmp_path, []), plot=plot)
    gc.disable()
    try:
        save_checkpoint(save)
    finally:
        gc.enable()
    assert left and left[0]() is None


def test_a_full_disk_in_trainers_save_is_one_checkpoint_error_and_keeps_the_last_checkpoint(tmp_path):
    calls = []
    save_checkpoint(_save(tmp_path, calls, step=1))

    def full():
        (tmp_path / "checkpoint-2").mkdir()
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(CheckpointError, match="checkpoint-2"):
        save_checkpoint(_save(tmp_path, calls, step=2, trainer_files=full))
    assert not (tmp_path / "checkpoint-2").exists()  # removed: space back
    assert [p.name for _, p in ckpt.checkpoints(tmp_path)] == ["checkpoint-1"]


def test_conclude_saves_the_last_step_once_and_raises_training_stopped(tmp_path, capsys):
    saves = []
    with pytest.raises(TrainingStopped) as info:
        conclude(OneProcess(), signal.SIGTERM, output_dir=str(tmp_path), step=3, max_steps=9,
                 save=lambda: saves.append(3))  # fmt: skip
    assert saves == [3] and info.value.code == 128 + signal.SIGTERM
    assert "Stopped by SIGTERM after step 3/9; checkpoint saved to" in capsys.readouterr().err
    (tmp_path / "checkpoint-3").mkdir(exist_ok=True)
    ckpt.mark_complete(tmp_path / "checkpoint-3", 3)
    with pytest.raises(TrainingStopped):
        conclude(OneProcess(), signal.SIGINT, output_dir=str(tmp_path), step=3, max_steps=9,
                 save=lambda: saves.append("again"))  # fmt: skip
    assert saves == [3]  # a complete checkpoint of that step exists: not saved again


def test_stop_at_step_end_reads_only_the_signals():
    from transformers import TrainerControl

    signals, control = StopSignals(announce=False), TrainerControl()
    callback = StopAtStepEnd(OneProcess(), signals)
    args = type("Args", (), {"device": "cpu"})()
    callback.on_step_end(args, None, control)
    assert not control.should_save and not control.should_training_stop
    signals.signum = signal.SIGTERM
    callback.on_step_end(args, None, control)
    assert control.should_save and control.should_training_stop


def test_no_stage_imports_the_trainer():
    """Dependencies run stages <- trainer: lifecycle/, batch/, generation/ never import trainer.py."""
    for stage in ("lifecycle", "batch", "generation"):
        for path in (ROOT / "verifiers" / "training" / stage).glob("*.py"):
            tree = ast.parse(path.read_text())
            names = [n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module]
            names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
            assert "verifiers.training.trainer" not in names, (
                f"{os.path.relpath(path, ROOT)} imports the trainer"
            )
