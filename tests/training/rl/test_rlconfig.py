"""RLConfig (verifiers/training/rl/config.py): defaults, validation and its mapping onto GRPOConfig.
(RLTrainer: test_trainer.py; the step line: test_step_line.py.)"""

from __future__ import annotations

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from tests.doubles.rl_config import cfg  # noqa: E402
from verifiers.errors import ConfigError  # noqa: E402
from verifiers.training.config.fields import GRPOConfig  # noqa: E402
from verifiers.training.rl import config as rl_mod  # noqa: E402
from verifiers.training.rl.config import RLConfig  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_process")  # tests/training/rl/conftest.py


def test_defaults_are_lora_first_cispo_and_one_step_off_policy():
    c = RLConfig()
    assert c.use_lora and c.lora_rank == 8 and c.lora_alpha == 16 and c.lora_dropout == 0.0
    assert c.target_modules == ["q_proj", "k_proj", "v_proj", "o_proj"]
    assert c.loss_type == "cispo" and c.beta == 0.0 and c.num_batches_ahead == 1
    assert c.output_dir == "outputs/rl-run"
    assert cfg(run_name="abc").output_dir == "outputs/abc"
    assert cfg(output_dir="/tmp/x").output_dir == "/tmp/x"


def test_maps_onto_grpo_config(tmp_path):
    c = cfg(
        output_dir=str(tmp_path),
        rollouts_per_example=4,
        micro_batch_size=2,
        batch_size=16,
        max_steps=7,
        max_tokens=64,
        max_seq_len=256,
        max_prompt_len=128,
        generation_timeout=42.0,
        max_concurrent=5,
        vllm_server_port=8123,
        vllm_server_timeout=12.0,
        learning_rate=3e-5,
        temperature=0.7,
        log_samples_every=0,
    )
    g = c.to_grpo_config()
    assert isinstance(g, GRPOConfig)
    assert g.num_generations == 4
    assert g.per_device_train_batch_size == 2
    assert g.gradient_accumulation_steps == 8  # 16 / (2 × 1 process)
    assert (g.max_tokens, g.max_seq_len, g.max_prompt_length) == (64, 256, 128)
    assert g.async_generation_timeout == 42.0 and g.max_concurrent == 5
    assert (g.vllm_server_host, g.vllm_server_port, g.vllm_server_timeout) == ("127.0.0.1", 8123, 12.0)
    assert g.learning_rate == 3e-5 and g.temperature == 0.7 and g.max_steps == 7
    assert g.loss_type == "cispo" and g.num_batches_ahead == 1 and g.beta == 0.0
    assert g.output_dir == str(tmp_path) and g.run_name == "t"
    assert g.log_completions is False and g.disable_tqdm is True
    # one optimizer step per generation batch: one step off-policy with num_batches_ahead=1
    assert g.generation_batch_size == 16 and g.steps_per_generation == 8


def test_world_size_divides_the_batch_between_processes(tmp_path, monkeypatch):
    c = cfg(output_dir=str(tmp_path), rollouts_per_example=4, micro_batch_size=2, batch_size=16)
    # planned from one process (vf-rl validating a 2-GPU run): the same global layout
    g = c.to_grpo_config(world_size=2)
    assert g.gradient_accumulation_steps == 4
    assert g.per_device_train_batch_size * g.world_size * g.gradient_accumulation_steps == 16
    monkeypatch.setenv("WORLD_SIZE", "2")  # what accelerate sets in each of 2 processes
    assert rl_mod.launched_world_size() == 2
    with pytest.raises(ConfigError, match=r"micro_batch_size × processes = 2 × 2 = 4"):
        cfg(rollouts_per_example=2, micro_batch_size=2, batch_size=6).to_grpo_config()


def test_grpo_args_pass_other_fields_through(tmp_path):
    g = cfg(
        output_dir=str(tmp_path), grpo_args={"epsilon": 0.3, "seed": 3, "num_completions_to_print": 1}
    ).to_grpo_config()
    assert g.epsilon == 0.3 and g.seed == 3 and g.num_completions_to_print == 1


def test_gradient_checkpointing_is_non_reentrant_for_lora(tmp_path):
    g = cfg(output_dir=str(tmp_path), gradient_checkpointing=True).to_grpo_config()
    assert g.gradient_checkpointing and g.gradient_checkpointing_kwargs == {"use_reentrant": False}


def test_lora_config():
    lora = cfg(lora_rank=4, lora_alpha=8, lora_dropout=0.1, lora_target_modules=["q_proj"]).lora_config()
    assert (lora.r, lora.lora_alpha, lora.lora_dropout) == (4, 8, 0.1)
    assert set(lora.target_modules) == {"q_proj"}
    assert cfg(use_lora=False).lora_config() is None


@pytest.mark.parametrize(
    "kw, message",
    [
        (
            dict(batch_size=20, micro_batch_size=8, rollouts_per_example=4),
            r"batch_size=20 is not divisible by micro_batch_size × processes = 8 × 1 = 8 \(use e.g. batch_size = 16 or 24\)",
        ),
        (
            dict(batch_size=24, micro_batch_size=4, rollouts_per_example=16),
            r"batch_size=24 is not divisible by rollouts_per_example=16",
        ),
        (dict(batch_size=0), r"batch_size=0 must be a positive integer"),
        (
            dict(rollouts_per_example=1, batch_size=8, micro_batch_size=8),
            r"rollouts_per_example=1 must be >= 2",
        ),
        (
            dict(max_prompt_len=2048, max_seq_len=2048),
            r"max_prompt_len=2048 must be < max_seq_len=2048",
        ),
        (dict(max_tokens=4096), r"max_tokens=4096 must be >= 1 and < max_seq_len=2048"),
        (dict(generation_timeout=0), r"generation_timeout=0 must be > 0"),
        (dict(lora_rank=0), r"lora_rank=0 must be >= 1"),
        (dict(lora_dropout=1.0), r"lora_dropout=1.0 must be in \[0, 1\)"),
        (dict(run_name=""), r"run_name='' must be a non-empty string"),
        (
            dict(grpo_args={"num_generations": 4}),
            r"grpo_args sets 'num_generations', which RLConfig sets from 'rollouts_per_example'",
        ),
        (dict(grpo_args={"learning_rate": 1.0}), r"grpo_args sets 'learning_rate', an RLConfig field"),
        (
            dict(grpo_args={"epsilon_hi": 0.3}),
            r"unknown key 'epsilon_hi' in grpo_args; did you mean 'epsilon_high'\?",
        ),
    ],
)
def test_validation_messages(kw, message):
    with pytest.raises(ConfigError, match=message) as info:
        cfg(**kw)
    assert "\n" not in str(info.value)


def test_grpo_rules_still_apply_at_mapping(tmp_path):
    with pytest.raises(ConfigError, match=r"temperature=0.0 must be > 0"):
        cfg(output_dir=str(tmp_path), temperature=0.0).to_grpo_config()
    with pytest.raises(ConfigError, match=r"unknown loss_type='ppo' \(use one of: .*cispo"):
        cfg(output_dir=str(tmp_path), loss_type="ppo").to_grpo_config()


def test_wandb_without_wandb_installed_is_a_config_error(tmp_path, monkeypatch):
    import importlib.util

    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(ConfigError, match="wandb is not installed"):
        cfg(output_dir=str(tmp_path), report_to="wandb").to_grpo_config()
