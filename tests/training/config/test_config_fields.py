"""Every GRPOConfig / RLConfig field changes behaviour or is refused; values assigned after
construction (the 0.1.x ``args = grpo_defaults(...); args.x = ...`` habit) are honoured."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from transformers import TrainingArguments  # noqa: E402

import verifiers  # noqa: E402
from verifiers.errors import ConfigError  # noqa: E402
from verifiers.training.config.fields import GRPOConfig, grpo_defaults, lora_defaults  # noqa: E402
from verifiers.training.generation.producer import sampling_args_from_config  # noqa: E402
from verifiers.training.rl.config import RLConfig  # noqa: E402
from verifiers.training.rl.output import SampleSchedule  # noqa: E402

SOURCE = Path(verifiers.__file__).parent


pytestmark = pytest.mark.usefixtures("one_process_no_gpu")  # tests/training/config/conftest.py


def defaults(**kw) -> GRPOConfig:
    kw.setdefault("report_to", "none")
    kw.setdefault("output_dir", "/tmp/vf-test-fields")
    return grpo_defaults("fields", **kw)


# -- assigned after construction ----------------------------------------------------------------


def test_batch_fields_assigned_after_grpo_defaults_are_rederived():
    args = defaults()
    assert (args.generation_batch_size, args.steps_per_generation) == (32, 4)  # 8 × 4 as created
    args.per_device_train_batch_size = 12
    args.num_generations = 12
    args.gradient_accumulation_steps = 8
    args = args.resolve()
    assert (args.generation_batch_size, args.steps_per_generation) == (96, 8)


def test_explicit_layout_choices_survive_later_assignments():
    args = defaults(per_device_train_batch_size=4, num_generations=4, steps_per_generation=8)
    args.gradient_accumulation_steps = 2
    args = args.resolve()
    assert (args.steps_per_generation, args.generation_batch_size) == (8, 32)  # kept; size follows
    args = defaults(per_device_train_batch_size=4, num_generations=4)
    args.generation_batch_size = 64  # assigned: the user's choice
    args.gradient_accumulation_steps = 2
    args = args.resolve()
    assert (args.generation_batch_size, args.steps_per_generation) == (64, 16)


def test_assigned_values_are_validated_with_one_line():
    args = defaults()
    args.num_generations = 3  # 8 × 4 = 32 is not a multiple of 3
    with pytest.raises(ConfigError, match=r"= 32, is not divisible by num_generations=3") as info:
        args.resolve()
    assert "\n" not in str(info.value) and info.value.hint
    for name, value, pattern in [
        ("temperature", 0.0, "temperature=0.0 must be > 0"),
        ("max_prompt_length", 8192, "max_prompt_length=8192 must be < max_seq_len=4096"),
        ("epsilon", 1.5, r"epsilon=1.5 must be in \(0, 1\)"),
        ("max_tokens", 0, "max_tokens=0 must be >= 1"),
        ("learning_rate", -1.0, "learning_rate=-1.0 must be >= 0"),
    ]:
        args = defaults()
        setattr(args, name, value)
        with pytest.raises(ConfigError, match=pattern):
            args.resolve()


def test_ddp_timeout_is_derived_from_the_lone_waits_and_short_values_are_refused():
    # Derived: 30 minutes (a checkpoint write), or longer where a push or a batch may take longer.
    assert defaults().ddp_timeout == 1800
    assert defaults(sync_weights_timeout=2400).ddp_timeout == 2430
    args = defaults()
    args.async_generation_timeout = 3600.0  # assigned later: derived again by resolve()
    assert args.resolve().ddp_timeout == 3630
    assert defaults(ddp_timeout=900).ddp_timeout == 900  # the user's value is kept
    with pytest.raises(ConfigError) as info:
        defaults(ddp_timeout=300)  # async_generation_timeout is 600
    assert str(info.value) == (
        "ddp_timeout=300 is shorter than what the main process may do alone while the others wait: "
        "max(sync_weights_timeout=300, async_generation_timeout=600) + 30 = 630 s (set ddp_timeout "
        ">= 630, lower those timeouts, or leave ddp_timeout unset (derived))"
    )
    args = defaults(ddp_timeout=900)
    args.sync_weights_timeout = 1000.0  # the kept value no longer fits: refused at resolve()
    with pytest.raises(ConfigError, match="ddp_timeout=900 is shorter"):
        args.resolve()


def test_epsilon_high_follows_epsilon_and_loss_type_unless_given():
    args = defaults()
    args.epsilon = 0.1
    assert args.resolve().epsilon_high == 0.1
    args.loss_type = "dapo"
    assert args.resolve().epsilon_high == 0.28
    args.epsilon_high = 0.3
    args.loss_type = "grpo"
    assert args.resolve().epsilon_high == 0.3


def test_max_prompt_length_default_follows_max_seq_len():
    assert defaults().max_prompt_length == 512  # max_seq_len 4096
    assert GRPOConfig(output_dir="/tmp/x", report_to="none", max_seq_len=512).max_prompt_length == 256
    args = defaults()
    args.max_seq_len = 300
    assert args.resolve().max_prompt_length == 150
    args.max_prompt_length = 100  # given: kept
    args.max_seq_len = 1000
    assert args.resolve().max_prompt_length == 100


def test_training_arguments_assigned_after_creation_are_converted_and_checked():
    args = defaults()
    args.eval_strategy = "steps"  # eval_steps unset: TrainingArguments takes logging_steps
    args.logging_steps = 5
    args.report_to = "tensorboard"
    args = args.resolve()
    assert (args.eval_strategy, args.eval_steps, args.report_to, args.do_eval) == (
        "steps",
        5,
        ["tensorboard"],
        True,
    )
    args.logging_steps = 7
    assert args.resolve().eval_steps == 7  # derived, so derived again
    args.eval_steps = 3
    args.logging_steps = 9
    assert args.resolve().eval_steps == 3  # assigned: kept
    args.lr_scheduler_type = "bogus"
    with pytest.raises(ConfigError, match="lr_scheduler_type='bogus' is not a valid SchedulerType"):
        args.resolve()
    args = defaults(use_cpu=True)
    assert args.mixed_precision == "no"
    args.bf16 = True  # CPU bf16 autocast, asked for after creation
    assert args.resolve().mixed_precision == "bf16"


def test_max_completion_length_caps_the_whole_rollout():
    """The guide's lengths: max_tokens per turn, max_completion_length for a rollout's whole
    completion (issue 23). The first turn may use at most the smaller of the two; longer
    samples are cut to the cap and trained as truncated (test_guide_snippets.py)."""
    args = defaults()
    args.max_tokens = 1024
    args.max_completion_length = 2048
    args = args.resolve()
    assert (args.max_tokens, args.max_completion_length) == (1024, 2048)
    assert sampling_args_from_config(args)["max_tokens"] == 1024
    args = GRPOConfig(output_dir="/tmp/x", report_to="none", max_completion_length=48)
    assert args.max_tokens is None and sampling_args_from_config(args)["max_tokens"] == 48
    args = GRPOConfig(output_dir="/tmp/x", report_to="none", max_tokens=64, max_completion_length=32)
    assert sampling_args_from_config(args)["max_tokens"] == 32
    with pytest.raises(ConfigError, match="max_completion_length=0 must be >= 1"):
        GRPOConfig(output_dir="/tmp/x", report_to="none", max_completion_length=0)


# -- LoRA --------------------------------------------------------------------------------------


def test_all_linear_is_accepted(tiny_model_dir):
    peft = pytest.importorskip("peft")
    assert lora_defaults(target_modules="all-linear").target_modules == "all-linear"
    rl = RLConfig(lora_target_modules="all-linear")
    assert rl.target_modules == "all-linear" and rl.lora_config().target_modules == "all-linear"
    from transformers import AutoModelForCausalLM

    model = peft.get_peft_model(AutoModelForCausalLM.from_pretrained(str(tiny_model_dir)), rl.lora_config())
    adapted = {n.split(".lora_A")[0].rsplit(".", 1)[-1] for n, _ in model.named_parameters() if "lora_A" in n}
    assert {"q_proj", "v_proj", "gate_proj", "down_proj"} <= adapted  # every linear layer


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(r=0), "r=0 must be >= 1"),
        (dict(r=2.5), "r=2.5 must be an integer"),
        (dict(alpha=0), "alpha=0 must be > 0"),
        (dict(dropout=1.0), r"dropout=1.0 must be in \[0, 1\)"),
        (dict(dropout=-0.1), r"dropout=-0.1 must be in \[0, 1\)"),
        (dict(target_modules=[]), r"target_modules=\[\] must be a non-empty list"),
        (dict(target_modules=""), "target_modules='' names no module"),
    ],
)
def test_lora_defaults_refuses_bad_values_where_given(kwargs, pattern):
    with pytest.raises(ConfigError, match=pattern):
        lora_defaults(**kwargs)


@pytest.mark.parametrize(
    "kwargs, pattern",
    [
        (dict(lora_alpha=-1), "lora_alpha=-1 must be > 0"),
        (dict(learning_rate=-1e-5), "learning_rate=-1e-05 must be >= 0"),
        (dict(max_steps=0), "max_steps=0 must be >= 1"),
        (dict(warmup_steps=-1), "warmup_steps=-1 must be >= 0"),
        (dict(max_grad_norm=-0.5), "max_grad_norm=-0.5 must be >= 0"),
        (dict(temperature=0), "temperature=0 must be > 0"),
        (dict(top_p=1.5), r"top_p=1.5 must be in \(0, 1\]"),
        (dict(top_k=0), "top_k=0 must be >= 1"),
        (dict(vllm_server_port=0), r"vllm_server_port=0 is not a TCP port: it must be in \[1, 65535\]"),
        (dict(save_steps=0), "save_steps=0 must be >= 1"),
        (dict(num_iterations=1.5), "num_iterations=1.5 must be an integer"),
        (dict(max_seq_len=512, max_prompt_len=512), "max_prompt_len=512 must be < max_seq_len=512"),
    ],
)
def test_rlconfig_refuses_out_of_range_values_where_given(kwargs, pattern):
    with pytest.raises(ConfigError, match=pattern) as info:
        RLConfig(**kwargs)
    assert "\n" not in str(info.value)


def test_rlconfig_passes_the_rollout_cap_through_grpo_args():
    assert RLConfig(grpo_args={"max_completion_length": 64}).to_grpo_config().max_completion_length == 64


def test_rlconfig_max_prompt_len_default_follows_max_seq_len(tmp_path):
    """The guide's reverse-text config: max_seq_len = 512 and no max_prompt_len."""
    rl = RLConfig(output_dir=str(tmp_path), max_seq_len=512, max_tokens=128)
    assert rl.to_grpo_config().max_prompt_length == 256


# -- no field is accepted and then ignored -----------------------------------------------------

# GRPOConfig's own fields (and TrainingArguments' fields it gives a meaning for rollouts) that
# config.py itself folds into others, or whose effect is checked by a behavioural test.
GRPO_BEHAVIOURAL = {
    "max_completion_length": "test_max_completion_length_caps_the_whole_rollout",
    "max_prompt_length": "test_max_prompt_length_default_follows_max_seq_len; "
    "tests/training/generation/test_prompt_truncation.py; test_trainer.py::test_server_cuts_long_prompts_before_the_server",
    "epsilon_high": "test_epsilon_high_follows_epsilon_and_loss_type_unless_given",
    "ddp_timeout": "test_ddp_timeout_is_derived_from_the_lone_waits_and_short_values_are_refused; "
    "tests/training/lifecycle/test_rank_hangs.py",
    "generation_batch_size": "test_explicit_layout_choices_survive_later_assignments",
    "steps_per_generation": "test_explicit_layout_choices_survive_later_assignments",
    "ds3_gather_for_generation": "test_trainer.py::test_ds3_gather_and_eval_batch_size_are_honoured",
    "per_device_eval_batch_size": "test_trainer.py::test_ds3_gather_and_eval_batch_size_are_honoured",
}
GRPO_REFUSED: dict[str, str] = {}  # field -> the test that shows the refusal (none today)


def grpo_own_fields() -> list[str]:
    base = {f.name for f in dataclasses.fields(TrainingArguments)}
    own = [f.name for f in dataclasses.fields(GRPOConfig) if f.name not in base]
    return own + ["per_device_eval_batch_size"]


def test_every_grpo_field_is_read_or_refused():
    """A field is read outside config.py (``args.<name>``, ``a.<name>`` or a quoted name in a
    table of names), or has a behavioural test named above; a new ignored field fails here."""
    code = {p: p.read_text(encoding="utf-8") for p in SOURCE.rglob("*.py") if p.name != "config.py"}
    unread = []
    for name in grpo_own_fields():
        if name in GRPO_BEHAVIOURAL or name in GRPO_REFUSED:
            continue
        pattern = re.compile(rf"\b(?:args|a|self\.args)\.{name}\b|[\"']{name}[\"']")
        if not any(pattern.search(text) for text in code.values()):
            unread.append(name)
    assert not unread, f"GRPOConfig fields nothing reads (use them, refuse them, or add a row): {unread}"


# RLConfig: every field, set to a value other than its default, must change what the run is
# given (the GRPOConfig, the LoRA config, the W&B variables or the sample schedule) or be refused.
RL_CHANGES: dict[str, dict] = {
    "run_name": dict(run_name="other"),
    "output_dir": dict(output_dir="/tmp/vf-other"),
    "rollouts_per_example": dict(rollouts_per_example=4),
    "micro_batch_size": dict(micro_batch_size=4),
    "batch_size": dict(batch_size=32),
    "max_steps": dict(max_steps=7),
    "max_tokens": dict(max_tokens=64),
    "max_seq_len": dict(max_seq_len=4096),
    "max_prompt_len": dict(max_prompt_len=128),
    "learning_rate": dict(learning_rate=3e-5),
    "lr_scheduler_type": dict(lr_scheduler_type="cosine"),
    "warmup_steps": dict(warmup_steps=3),
    "max_grad_norm": dict(max_grad_norm=0.5),
    "weight_decay": dict(weight_decay=0.1),
    "bf16": dict(bf16=True),  # None is False without a GPU; CPU bf16 needs use_cpu (base below)
    "gradient_checkpointing": dict(gradient_checkpointing=True),
    "loss_type": dict(loss_type="grpo"),
    "beta": dict(beta=0.01),
    "num_iterations": dict(num_iterations=2),
    "num_batches_ahead": dict(num_batches_ahead=0),
    "cpu_phases": dict(cpu_phases="overlap"),
    "temperature": dict(temperature=0.7),
    "top_p": dict(top_p=0.9),
    "top_k": dict(top_k=20),
    "min_p": dict(min_p=0.1),
    "repetition_penalty": dict(repetition_penalty=1.1),
    "stop": dict(stop=["</answer>"]),
    "use_lora": dict(use_lora=False),
    "lora_rank": dict(lora_rank=16),
    "lora_alpha": dict(lora_alpha=32),
    "lora_dropout": dict(lora_dropout=0.1),
    "lora_target_modules": dict(lora_target_modules="all-linear"),
    "vllm_server_host": dict(vllm_server_host="10.0.0.2"),
    "vllm_server_port": dict(vllm_server_port=8123),
    "vllm_server_timeout": dict(vllm_server_timeout=12.0),
    "generation_timeout": dict(generation_timeout=42.0),
    "max_concurrent": dict(max_concurrent=5),
    "eval_strategy": dict(eval_strategy="steps", eval_steps=5),
    "eval_steps": dict(eval_steps=5),
    "save_steps": dict(save_steps=7),
    "logging_steps": dict(logging_steps=3),
    "log_samples_every": dict(log_samples_every=3),
    "num_samples_to_print": dict(num_samples_to_print=5),
    "report_to": dict(report_to="tensorboard"),
    # W&B names matter only when reporting to W&B: compared with report_to="wandb" on both sides.
    "wandb_project": dict(wandb_project="p"),
    "wandb_name": dict(wandb_name="n"),
    "wandb_entity": dict(wandb_entity="e"),
    "grpo_args": dict(grpo_args={"epsilon": 0.3}),
}
WANDB_FIELDS = {"wandb_project", "wandb_name", "wandb_entity"}


def observable(rl: RLConfig, monkeypatch) -> dict:
    """What a run built from ``rl`` is given: every GRPOConfig value, LoRA, W&B names, sample schedule."""
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda n, *a: object() if n == "wandb" else real(n, *a))
    grpo = rl.to_grpo_config().to_dict()
    grpo.pop("logging_dir", None)  # a timestamp
    lora = rl.lora_config()
    lora = None if lora is None else (lora.r, lora.lora_alpha, lora.lora_dropout, str(lora.target_modules))
    schedule = [cb.every for cb in rl.callbacks() if isinstance(cb, SampleSchedule)]
    return {"grpo": grpo, "lora": lora, "wandb": rl.wandb_environment(), "samples": schedule}


def test_every_rlconfig_field_changes_the_run(monkeypatch, tmp_path):
    fields = [f.name for f in dataclasses.fields(RLConfig)]
    missing = sorted(set(fields) - set(RL_CHANGES))
    assert not missing, f"RLConfig fields without a row in RL_CHANGES: {missing}"
    for name in fields:
        extra = {"report_to": "wandb"} if name in WANDB_FIELDS else {}
        base = {"grpo_args": {"use_cpu": True}} if name == "bf16" else {}
        before = observable(RLConfig(**{**base, **extra}), monkeypatch)
        after = observable(RLConfig(**{**base, **extra, **RL_CHANGES[name]}), monkeypatch)
        assert after != before, f"RLConfig.{name} changed nothing the run is given"


# -- TRL names ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"use_vllm": True},
            "GRPOConfig has no field 'use_vllm' (a TRL setting) (generation always goes through",
        ),
        (
            {"reward_weights": [1.0]},
            "GRPOConfig has no field 'reward_weights' (a TRL setting) (give the weights to the environment",
        ),
        ({"num_generation": 4}, "GRPOConfig has no field 'num_generation' (did you mean 'num_generations'?)"),
        ({"scale_rewards": "batch"}, "scale_rewards='batch' (TRL's batch-wide std) is not supported"),
        ({"scale_rewards": "yes"}, "scale_rewards='yes' must be True or False"),
    ],
)
def test_trl_fields_and_values_are_refused_with_the_fix(kwargs, message):
    with pytest.raises(ConfigError) as err:
        defaults(**kwargs)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_trl_scale_rewards_strings_mean_what_they_mean_in_trl():
    # "none" is a truthy string: taken as is, it would turn scaling on.
    assert defaults(scale_rewards="none").scale_rewards is False
    args = defaults()
    args.scale_rewards = "group"  # assigned after creation, the 0.1.x habit
    assert args.resolve().scale_rewards is True
