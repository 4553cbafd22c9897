"""RLTrainer (verifiers/training/rl/trainer.py): a GRPOTrainer built from a model name and an RLConfig
(LoRA on, the step line's callbacks in place of Trainer's), and its refusals. Tier 2 (the tiny local
model; no training step)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.doubles.rl_config import cfg  # noqa: E402
from verifiers.errors import ConfigError  # noqa: E402
from verifiers.training.config.fields import GRPOConfig  # noqa: E402
from verifiers.training.rl import output as rl_output  # noqa: E402
from verifiers.training.rl import trainer as rl_trainer  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_process")  # tests/training/rl/conftest.py


def test_rltrainer_is_a_grpo_trainer_with_lora_from_a_name(tiny_model_dir, tmp_path, capsys):
    from datasets import Dataset
    from transformers import PrinterCallback, ProgressCallback

    import verifiers as vf
    from verifiers.training.trainer import GRPOTrainer
    from verifiers.training.weights.sync import is_peft_model

    env = vf.SingleTurnEnv(dataset=Dataset.from_dict({"question": ["a", "b"], "answer": ["a", "b"]}))
    args = cfg(
        output_dir=str(tmp_path), rollouts_per_example=2, micro_batch_size=2, batch_size=4, max_steps=1
    )
    trainer = rl_trainer.RLTrainer(str(tiny_model_dir), env, args=args)
    assert isinstance(trainer, GRPOTrainer) and trainer.rl_args is args
    assert is_peft_model(trainer.model) and trainer.processing_class is not None
    assert trainer.args.num_generations == 2 and trainer.args.gradient_accumulation_steps == 2
    kinds = {type(c) for c in trainer.callback_handler.callbacks}
    assert rl_output.StepLogger in kinds and rl_output.SampleSchedule in kinds
    assert PrinterCallback not in kinds and ProgressCallback not in kinds
    out = capsys.readouterr().out
    assert f"Loading model {tiny_model_dir}" in out
    assert "trainable (LoRA r=8 alpha=16 on q_proj, k_proj, v_proj, o_proj)" in out


def test_rltrainer_refuses_a_grpo_config(tmp_path):
    with pytest.raises(ConfigError, match="args must be an RLConfig, got GRPOConfig"):
        rl_trainer.RLTrainer("unused", env=None, args=GRPOConfig(output_dir=str(tmp_path), report_to="none"))


def test_rltrainer_needs_a_tokenizer_for_a_nameless_model():
    with pytest.raises(ConfigError, match="processing_class is required"):
        rl_trainer._load_model(SimpleNamespace(config=SimpleNamespace(_name_or_path="")), None)
