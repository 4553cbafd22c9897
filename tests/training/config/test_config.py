"""GRPOConfig defaults and validation, the batch-layout rule, grpo_defaults fallbacks, lora_defaults."""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from verifiers.errors import ConfigError  # noqa: E402
from verifiers.training.config import fields as config_mod  # noqa: E402
from verifiers.training.config.fields import (  # noqa: E402
    GRPOConfig,
    grpo_defaults,
    lora_defaults,
    resolve_batch_layout,
)
from verifiers.utils.logging import reset_warn_once  # noqa: E402

# api.md, "Training": GRPOConfig fields and defaults
API_DEFAULTS = dict(
    num_generations=8,
    max_prompt_length=512,
    max_seq_len=2048,
    max_tokens=None,
    temperature=1.0,
    top_p=1.0,
    top_k=None,
    min_p=None,
    repetition_penalty=1.0,
    presence_penalty=0.0,
    frequency_penalty=0.0,
    max_concurrent=1024,
    num_batches_ahead=1,
    async_generation_timeout=600.0,
    async_max_queue_size=None,
    vllm_server_port=8000,
    vllm_server_timeout=300.0,
    beta=0.001,
    num_iterations=1,
    epsilon=0.2,
    delta=None,
    scale_rewards=False,
    loss_type="dr_grpo",
    mask_env_responses=True,
    mask_truncated_completions=True,
    zero_truncated_completions=False,
    sync_ref_model=True,
    ref_model_mixup_alpha=0.5,
    ref_model_sync_steps=100,
    log_completions=False,
    num_completions_to_print=None,
    shuffle_dataset=True,
    learning_rate=1e-6,
)


def make(**kw) -> GRPOConfig:
    kw.setdefault("output_dir", "/tmp/vf-test-config")
    kw.setdefault("report_to", "none")
    return GRPOConfig(**kw)


@pytest.fixture
def warnings_seen():
    """Messages logged by verifiers.training.config.fields (independent of propagation settings)."""
    reset_warn_once()
    seen: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record):
            seen.append(record.getMessage())

    handler = Collect(level=logging.WARNING)
    config_mod.logger.addHandler(handler)
    yield seen
    config_mod.logger.removeHandler(handler)
    reset_warn_once()


def test_api_defaults():
    cfg = make(per_device_train_batch_size=8)
    for name, value in API_DEFAULTS.items():
        assert getattr(cfg, name) == value, name
    # resolved on the config: one generation batch per optimizer step
    assert cfg.steps_per_generation == cfg.gradient_accumulation_steps == 1
    assert cfg.generation_batch_size == 8
    assert cfg.epsilon_high == 0.2  # None resolves to epsilon
    assert cfg.remove_unused_columns is False
    assert all(
        f.metadata.get("help") for f in GRPOConfig.__dataclass_fields__.values() if f.name in API_DEFAULTS
    )


def test_dapo_defaults_to_clip_higher():
    assert make(per_device_train_batch_size=8, loss_type="dapo").epsilon_high == 0.28
    assert make(per_device_train_batch_size=8, loss_type="dapo", epsilon_high=0.25).epsilon_high == 0.25


def test_generation_batch_settings():
    cfg = make(per_device_train_batch_size=4, num_generations=4, gradient_accumulation_steps=2)
    assert (cfg.generation_batch_size, cfg.steps_per_generation) == (8, 2)
    cfg = make(per_device_train_batch_size=4, num_generations=4, generation_batch_size=16)
    assert cfg.steps_per_generation == 4
    cfg = make(per_device_train_batch_size=4, num_generations=4, steps_per_generation=3)
    assert cfg.generation_batch_size == 12


def test_config_rebuilt_from_its_resolved_values():
    import dataclasses

    cfg = make(per_device_train_batch_size=4, num_generations=4, gradient_accumulation_steps=2)
    again = dataclasses.replace(cfg, max_steps=7)
    assert (again.generation_batch_size, again.steps_per_generation, again.max_steps) == (8, 2, 7)


def test_batch_layout_multi_process():
    # 2 per device × 4 processes × 3 accumulation = 24 per optimizer step; 24 % 8 == 0
    assert resolve_batch_layout(
        per_device_train_batch_size=2, num_processes=4, gradient_accumulation_steps=3, num_generations=8
    ) == (24, 3)
    # generation batch of two optimizer steps: 48 samples = 6 micro-steps of 8
    assert resolve_batch_layout(
        per_device_train_batch_size=2,
        num_processes=4,
        gradient_accumulation_steps=3,
        num_generations=8,
        generation_batch_size=48,
    ) == (48, 6)


@pytest.mark.parametrize(
    "per_device, processes, accum, gens, ok",
    [
        # Cases where a check on only part of the product, or with the operands swapped, would
        # give the wrong answer; the rule is (per_device × processes × accumulation) % gens == 0.
        (3, 1, 2, 6, True),  # 6: per-device 3 alone is not a multiple of 6
        (1, 2, 4, 8, True),  # 8: per-device × processes = 2 alone is not
        (4, 1, 2, 8, True),  # 8: accumulation 2 alone is not
        (2, 1, 2, 8, False),  # 4: not a multiple of 8, although 8 % 4 == 0 (swapped operands)
        (4, 1, 3, 8, False),  # 12: not a multiple of 8, although 4 × 3 > 8
        (2, 3, 1, 4, False),  # 6: not a multiple of 4, although per-device 2 divides 4
    ],
)
def test_step_batch_divisibility_is_plain(per_device, processes, accum, gens, ok):
    # The rule: (per_device × processes × accumulation) % num_generations == 0, nothing else.
    assert ((per_device * processes * accum) % gens == 0) == ok
    kwargs = dict(
        per_device_train_batch_size=per_device,
        num_processes=processes,
        gradient_accumulation_steps=accum,
        num_generations=gens,
    )
    if ok:
        assert resolve_batch_layout(**kwargs)[0] == per_device * processes * accum
    else:
        with pytest.raises(
            ConfigError,
            match=rf"= {per_device * processes * accum}, is not divisible by num_generations={gens}",
        ):
            resolve_batch_layout(**kwargs)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (
            dict(per_device_train_batch_size=3, num_generations=4),
            "per_device_train_batch_size=3.*num_generations=4",
        ),
        (dict(num_generations=1, per_device_train_batch_size=2), "num_generations=1 must be >= 2"),
        (dict(loss_type="ppo"), r"unknown loss_type='ppo'.*grpo, bnpo, dr_grpo, dapo, cispo, gspo"),
        (dict(max_prompt_length=2048, max_seq_len=2048), "max_prompt_length=2048 must be < max_seq_len=2048"),
        (dict(epsilon=1.5), r"epsilon=1.5 must be in \(0, 1\)"),
        (dict(epsilon=0.0), r"epsilon=0.0 must be in \(0, 1\)"),
        (dict(epsilon_high=-0.1), "epsilon_high=-0.1 must be > 0"),
        (dict(delta=1.1), r"delta=1.1 must be > 1 \+ epsilon_high = 1.2"),
        (dict(num_batches_ahead=-1), "num_batches_ahead=-1 must be >= 0"),
        (dict(num_iterations=0), "num_iterations=0 must be >= 1"),
        (dict(beta=-0.1), "beta=-0.1 must be >= 0"),
        (dict(temperature=0.0), "temperature=0.0 must be > 0"),
        (dict(top_p=1.5), r"top_p=1.5 must be in \(0, 1\]"),
        (dict(importance_sampling_cap=0.5), "importance_sampling_cap=0.5 must be >= 1"),
        (dict(importance_sampling_mask_low=1.2), r"importance_sampling_mask_low=1.2 must be in \[0, 1\)"),
        (dict(importance_sampling_mask_high=0.9), "importance_sampling_mask_high=0.9 must be > 1"),
        (
            dict(min_group_mean_reward=0.8, max_group_mean_reward=0.2),
            "min_group_mean_reward=0.8 > max_group_mean_reward=0.2",
        ),
        (dict(ref_model_mixup_alpha=2.0), r"ref_model_mixup_alpha=2.0 must be in \[0, 1\]"),
        (dict(sync_weights_timeout=0), "sync_weights_timeout=0 must be > 0"),
        (dict(vllm_server_port=70000), "vllm_server_port=70000"),
        (
            dict(generation_batch_size=16, steps_per_generation=1),
            "generation_batch_size=16 and steps_per_generation=1 disagree.* = 8",
        ),
        (
            dict(generation_batch_size=12),
            r"generation_batch_size=12 is neither a multiple nor a whole fraction of .*\(8\)",
        ),
        (
            dict(gradient_accumulation_steps=2, steps_per_generation=3),
            "steps_per_generation=3 .* gradient_accumulation_steps=2",
        ),
    ],
)
def test_validation_messages_name_values(kwargs, pattern):
    kwargs.setdefault("per_device_train_batch_size", 8)
    with pytest.raises(ConfigError, match=pattern) as info:
        make(**kwargs)
    assert "\n" not in str(info.value)
    assert info.value.hint  # every message says how to fix it or why


def test_grpo_defaults_cpu_fallback(monkeypatch, warnings_seen, caplog):
    monkeypatch.setattr(config_mod, "_bf16_accelerator", lambda: False)
    monkeypatch.setattr(config_mod, "_installed", lambda module: False)
    monkeypatch.setenv("VF_CPU_DTYPE", "float32")  # a CPU whose bf16 is not clearly faster
    with caplog.at_level("INFO", logger="verifiers.training.config.fields"):
        cfg = grpo_defaults("my-run")
    assert cfg.bf16 is False
    assert cfg.report_to == []  # "none": nothing to report to
    assert any("bf16" in r.message and "fp32" in r.message for r in caplog.records)
    assert any("wandb is not installed" in m for m in warnings_seen)
    # api.md values (the 0.1.x defaults scripts rely on)
    assert cfg.output_dir == "outputs/my-run" and cfg.run_name == "my-run"
    assert cfg.learning_rate == 1e-6 and cfg.lr_scheduler_type == "constant_with_warmup"
    assert (cfg.warmup_steps, cfg.max_steps, cfg.max_grad_norm) == (10, 500, 0.01)
    assert (cfg.num_iterations, cfg.max_seq_len, cfg.per_device_train_batch_size) == (1, 4096, 8)
    assert (cfg.num_generations, cfg.gradient_accumulation_steps) == (8, 4)
    assert cfg.gradient_checkpointing and cfg.save_only_model and cfg.log_completions
    assert (cfg.save_strategy, cfg.save_steps, cfg.logging_steps) == ("steps", 500, 1)
    assert cfg.log_on_each_node is False and cfg.vllm_server_host == "127.0.0.1"
    # preset="small": what the shipped examples (and vf-rl) train with, none of them overriding it
    small = grpo_defaults("small-run", preset="small")
    assert (small.warmup_steps, small.max_grad_norm, small.beta, small.max_seq_len) == (0, 1.0, 0.0, 2048)
    assert not small.gradient_checkpointing and small.save_steps == 50 and small.report_to == []
    assert small.learning_rate == 1e-6 and (small.per_device_train_batch_size, small.num_generations) == (
        8,
        8,
    )
    with pytest.raises(ConfigError, match="unknown preset 'tiny'.*use one of"):
        grpo_defaults("x", preset="tiny")
    # warned once, not per call
    n = len(warnings_seen)
    grpo_defaults("again")
    assert len(warnings_seen) == n


def test_grpo_defaults_overrides(monkeypatch, warnings_seen):
    monkeypatch.setattr(config_mod, "_bf16_accelerator", lambda: False)
    cfg = grpo_defaults("r", max_steps=3, per_device_train_batch_size=4, num_generations=4, report_to="none")
    assert (cfg.max_steps, cfg.per_device_train_batch_size, cfg.num_generations) == (3, 4, 4)
    assert not any("wandb" in m for m in warnings_seen)
    # bf16 asked for explicitly on a machine without CUDA: CPU bf16 autocast, as asked, never a crash
    asked = grpo_defaults("r", bf16=True, report_to="none")
    assert asked.bf16 is True and asked.use_cpu is True


def test_report_to_prefers_tensorboard(monkeypatch, warnings_seen):
    monkeypatch.setattr(config_mod, "_installed", lambda module: module == "tensorboard")
    assert config_mod._available_report_to("wandb") == ["tensorboard"]
    assert config_mod._available_report_to(["wandb", "tensorboard"]) == ["tensorboard"]
    assert config_mod._available_report_to("none") == "none"
    monkeypatch.setattr(config_mod, "_installed", lambda module: True)
    assert config_mod._available_report_to("wandb") == "wandb"


def test_lora_defaults():
    peft = pytest.importorskip("peft")
    cfg = lora_defaults()
    assert isinstance(cfg, peft.LoraConfig)
    assert (cfg.r, cfg.lora_alpha, cfg.lora_dropout) == (8, 16, 0.0)
    assert set(cfg.target_modules) == {"q_proj", "k_proj", "v_proj", "o_proj"}
    assert cfg.task_type == peft.TaskType.CAUSAL_LM
    cfg = lora_defaults(r=16, alpha=32, dropout=0.05, target_modules=["q_proj"])
    assert (cfg.r, cfg.lora_alpha, cfg.lora_dropout, set(cfg.target_modules)) == (16, 32, 0.05, {"q_proj"})


@pytest.mark.parametrize(
    "env, fields, want",
    [
        ({"WORLD_SIZE": "2"}, {}, "ddp-on-cpu"),  # torchrun on a CPU machine: one DDP run over gloo
        ({"WORLD_SIZE": "2", "ACCELERATE_USE_DEEPSPEED": "true"}, {}, "gloo-only"),  # ZeRO-3 via accelerate
        ({"WORLD_SIZE": "2", "ACCELERATE_USE_FSDP": "true"}, {}, "FSDP needs CUDA devices"),
        (
            {"WORLD_SIZE": "2"},
            {"deepspeed": {"zero_optimization": {"stage": 3}}},
            "needs accelerate's launcher",
        ),
        ({"WORLD_SIZE": "1"}, {}, "untouched"),
    ],
)
def test_several_processes_without_cuda(monkeypatch, env, fields, want):
    # Each multi-process launch on a CPU machine either trains as one run or stops in one line
    # (issue 26: torchrun on CPU died with a TypeError on one rank, FSDP ran as separate runs).
    from types import SimpleNamespace

    import torch

    from verifiers.errors import ConfigError
    from verifiers.training.config.collective import cpu_distributed_backend

    for name in ("WORLD_SIZE", "ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_FSDP", "ACCELERATE_USE_CPU"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    args = SimpleNamespace(**{"use_cpu": False, "ddp_backend": None, "fsdp": "", "deepspeed": None, **fields})
    if want not in ("ddp-on-cpu", "gloo-only", "untouched"):
        with pytest.raises(ConfigError, match=want):
            cpu_distributed_backend(args)
        return
    cpu_distributed_backend(args)
    assert (args.use_cpu, args.ddp_backend) == {
        "ddp-on-cpu": (True, "gloo"),
        "gloo-only": (False, "gloo"),
        "untouched": (False, None),
    }[want]


def test_server_sleep_needs_generation_not_ahead():
    import verifiers as vf

    with pytest.raises(ConfigError, match=r"server_sleep_during_step=True needs num_batches_ahead=0"):
        vf.GRPOConfig(output_dir="/tmp/x", server_sleep_during_step=True, num_batches_ahead=1)
    vf.GRPOConfig(output_dir="/tmp/x", server_sleep_during_step=True, num_batches_ahead=0)
