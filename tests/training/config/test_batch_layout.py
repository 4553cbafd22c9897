"""The batch rule in rollout counts (batch_layout.rollout_layout), worked by hand, and both configs going
through it (the GRPOConfig side, resolve_batch_layout, is worked by hand in test_config.py)."""

from __future__ import annotations

import pytest

from verifiers.errors import ConfigError
from verifiers.training.config.batch_layout import BatchLayout, check_batch_sizes, rollout_layout


def test_rollout_counts_worked_by_hand():
    # 64 rollouts per optimizer step, 8 per micro-batch, groups of 8, 2 processes:
    # 64 / (8 × 2) = 4 micro-steps per optimizer step, one generation batch (64 rollouts,
    # 8 prompts) per optimizer step, so steps_per_generation = 4 micro-steps.
    assert rollout_layout(64, 8, 8, num_processes=2) == BatchLayout(
        num_generations=8,
        per_device_train_batch_size=8,
        gradient_accumulation_steps=4,
        generation_batch_size=64,
        steps_per_generation=4,
    )
    # one process, groups of 4: 16 / (2 × 1) = 8 accumulation steps
    assert rollout_layout(16, 2, 4).gradient_accumulation_steps == 8


@pytest.mark.parametrize(
    "args, message",
    [
        ((20, 8, 4), "batch_size=20 is not divisible by micro_batch_size × processes = 8 × 1 = 8"),
        ((24, 8, 16), "batch_size=24 is not divisible by rollouts_per_example=16"),
        ((0, 8, 8), "batch_size=0 must be a positive integer"),
    ],
)
def test_bad_rollout_counts_are_one_line_in_their_own_names(args, message):
    with pytest.raises(ConfigError) as err:
        rollout_layout(*args)
    assert str(err.value).startswith(message) and "\n" not in str(err.value)


def test_both_configs_use_the_one_rule(tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from verifiers.training.config.fields import GRPOConfig
    from verifiers.training.rl.config import RLConfig

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    rl = RLConfig(output_dir=str(tmp_path), batch_size=32, micro_batch_size=4, rollouts_per_example=8)
    g = rl.to_grpo_config()
    want = rollout_layout(32, 4, 8)
    assert (g.per_device_train_batch_size, g.gradient_accumulation_steps, g.num_generations) == (4, 8, 8)
    assert (g.generation_batch_size, g.steps_per_generation) == (
        want.generation_batch_size,
        want.steps_per_generation,
    )
    direct = GRPOConfig(
        output_dir=str(tmp_path),
        report_to="none",
        per_device_train_batch_size=4,
        gradient_accumulation_steps=8,
    )
    assert (direct.generation_batch_size, direct.steps_per_generation) == (32, 8)


def test_check_batch_sizes_names_the_process_count():
    check_batch_sizes(32, 8, 8, 4)
    with pytest.raises(ConfigError, match=r"micro_batch_size × max\(trainer.gpus, 1\) = 8 × 3 = 24"):
        check_batch_sizes(32, 8, 8, 3, processes_name="max(trainer.gpus, 1)")
