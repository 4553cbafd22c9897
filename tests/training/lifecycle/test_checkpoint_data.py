"""Checkpoints as data (verifiers/training/lifecycle/checkpoint.py): what GRPOTrainer adds to a checkpoint
is tensors and plain containers with a format version, read with ``weights_only=True``."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")

from verifiers.errors import ConfigError  # noqa: E402
from verifiers.training.lifecycle import checkpoint as ckpt  # noqa: E402
from verifiers.training.types import GeneratedBatch, PreparedBatch  # noqa: E402
from verifiers.types import GenerateOutputs, ProcessedOutputs  # noqa: E402


@dataclass
class ToolCall:  # stands in for an SDK object left in a completion
    name: str


class Pydantic:
    def model_dump(self):
        return {"role": "assistant", "content": "hi"}


def batch(index: int) -> GeneratedBatch:
    outputs = GenerateOutputs(
        prompt=[[{"role": "user", "content": "p"}]] * 2,
        completion=[[Pydantic()], [{"role": "assistant", "tool_calls": [ToolCall("f")]}]],
        answer=["a", "b"],
        state=[{"is_truncated": False, "error": None, "timing": (1.0, 2.0)}] * 2,
        info=[{}, {"k": 1}],
        task=["t", "t"],
        reward=[1.0, 0.5],
        metrics={"len": [3.0, 4.0]},
    )
    processed = ProcessedOutputs(
        [[1, 2]], [[1, 1]], [[3]], [[1]], [[-0.5]], [1.0], rollout_index=[0], is_truncated=[False]
    )
    return GeneratedBatch(index, index - 1, 2, outputs, processed, 1.5, {"errors/server_restarts": 0.0})


def test_generator_state_round_trips_as_data(tmp_path):
    state = {"trained": 3, "next": 5, "producer": {"cursor": 12}, "pending": [batch(3), batch(4)]}
    ckpt.save_generator_state(tmp_path, state)
    raw = torch.load(tmp_path / ckpt.GENERATOR_FILE, weights_only=True)  # no classes in the file
    assert raw["format"] == ckpt.FORMAT_VERSION
    back = ckpt.load_generator_state(tmp_path)
    assert (back["trained"], back["next"], back["producer"]) == (3, 5, {"cursor": 12})
    first = back["pending"][0]
    assert isinstance(first, GeneratedBatch) and (first.index, first.policy_version) == (3, 2)
    assert first.outputs.reward == [1.0, 0.5] and first.outputs.metrics == {"len": [3.0, 4.0]}
    assert first.outputs.completion[0] == [{"role": "assistant", "content": "hi"}]
    assert first.outputs.completion[1][0]["tool_calls"] == [{"name": "f"}]
    assert first.processed.completion_logprobs == [[-0.5]] and first.metrics == batch(3).metrics


def test_prepared_batch_round_trips_with_its_tensors(tmp_path):
    micro = [{"input_ids_BT": torch.arange(6).view(2, 3), "start": 1, "advantages_B": torch.ones(2)}]
    ckpt.save_prepared_batch(tmp_path, 0, PreparedBatch(7, micro, [4.0], ["7.0:abc"]))
    assert (tmp_path / "grpo_buffer_rank0.pt").is_file()  # the name earlier versions wrote: they resume
    back = ckpt.load_prepared_batch(tmp_path, 0)
    assert back.index == 7 and back.step_counts == [4.0] and back.rollout_ids == ["7.0:abc"]
    assert (
        torch.equal(back.micro[0]["input_ids_BT"], micro[0]["input_ids_BT"]) and back.micro[0]["start"] == 1
    )
    ckpt.save_prepared_batch(tmp_path, 1, None)  # between batches
    assert ckpt.load_prepared_batch(tmp_path, 1) is None
    assert ckpt.load_prepared_batch(tmp_path, 2) is None  # no file


def test_old_pickled_checkpoint_is_refused_with_one_clear_line(tmp_path):
    torch.save(
        {"trained": 1, "next": 2, "producer": {}, "pending": [batch(1)]}, tmp_path / ckpt.GENERATOR_FILE
    )
    with pytest.raises(ConfigError, match="not a format-2 verifiers checkpoint file") as info:
        ckpt.load_generator_state(tmp_path)
    assert "delete generator_state.pt" in str(info.value)


def test_missing_generator_state_is_none(tmp_path):
    assert ckpt.load_generator_state(tmp_path) is None
