"""``GRPOConfig`` (a ``transformers.TrainingArguments``) and ``grpo_defaults``.

Every training field is declared here once, with its default and its help; the defaults
that depend on the entry point (``grpo_defaults``' presets, ``RLConfig`` / ``vf-rl``) are
one table, ``presets.py``. The batch layout rule lives in ``batch_layout.py``, the field
checks in ``rules.py``, LoRA in ``lora.py`` (``lora_defaults`` is re-exported here).

The config is inert: constructing it checks and derives, and nothing else (no hook on
assignment, no process-group or exit side effects; ``GRPOTrainer`` applies those where
training starts). Settings assigned after construction (``args = grpo_defaults(...)``
then ``args.num_generations = 12``, the 0.1.x habit) are honoured by ``assigned.py``:
the trainer trains with a new config built from the values then on the object, in which
a value the user gave, at construction or by assignment, is kept and one that was only
derived is derived again.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import logging
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainingArguments

from verifiers.errors import ConfigError
from verifiers.training.config.assigned import DERIVED_FIELDS, resolved_config
from verifiers.training.config.batch_layout import GenerationPlan, plan_of, resolve_batch_layout
from verifiers.training.config.choices import DEFAULT_IS_CAP, DEFAULT_IS_MASK_BAND, LOSS_TYPES
from verifiers.training.config.collective import (
    collective_timeout,
    cpu_distributed_backend,
    deepspeed_launched,
)
from verifiers.training.config.lora import LORA_TARGET_MODULES, check_lora_settings, lora_defaults
from verifiers.training.config.presets import AUTO, FIELD, preset_value, preset_values
from verifiers.training.config.rules import (
    LORA_SYNC_MODES,
    at_least,
    check_report_to,
    fail,
    training_args_error,
    validate_fields,
)
from verifiers.training.config.trl_names import refuse_unknown_fields, scale_rewards_flag
from verifiers.utils.logging import warn_once

logger = logging.getLogger(__name__)

DAPO_EPSILON_HIGH = 0.28  # the DAPO paper's clip-higher bound
DEFAULT_MAX_PROMPT_LENGTH = 512  # capped at max_seq_len // 2 (default_max_prompt_length)
__all__ = [  # the names this module has always offered, some now defined next door
    "GRPOConfig",
    "grpo_defaults",
    "lora_defaults",
    "check_lora_settings",
    "resolve_batch_layout",
    "default_max_prompt_length",
    "LORA_SYNC_MODES",
    "LORA_TARGET_MODULES",
]


def _f(default: Any, help: str) -> Any:
    """A dataclass field with its help text (shown by ``HfArgumentParser``)."""
    return field(default=default, metadata={"help": help})


@dataclass
class GRPOConfig(TrainingArguments):
    """Training arguments for ``GRPOTrainer``; see the module docstring for the batch layout."""

    # Overridden TrainingArguments defaults.
    learning_rate: float = _f(1e-6, "Initial AdamW learning rate.")
    remove_unused_columns: bool = _f(
        False, "Keep dataset columns (prompt, answer, info, task): the environment needs them."
    )

    # Groups and lengths.
    num_generations: int = _f(8, "Completions sampled per prompt (group size, >= 2).")
    max_prompt_length: int | None = _f(
        None,
        "Longest prompt in tokens (< max_seq_len); longer prompts lose their oldest non-system "
        "messages (then the start of their text) before they are sent to the server. "
        "None: min(512, max_seq_len // 2).",
    )
    max_seq_len: int = _f(2048, "Longest prompt + completion in tokens per sample.")
    max_tokens: int | None = _f(None, "Most tokens the model may generate per turn; None: up to max_seq_len.")
    max_completion_length: int | None = _f(
        None,
        "Most completion tokens of a whole rollout (every turn, environment replies included); a "
        "rollout that reaches it is stopped and trained as truncated. Single-turn: the same as "
        "max_tokens. None: only max_seq_len bounds it.",
    )
    stop: list[str] | None = _f(None, "Strings that end a turn (sent to the server); None: none.")

    # Sampling (passed to the inference server).
    temperature: float = _f(1.0, "Sampling temperature (> 0).")
    top_p: float = _f(1.0, "Nucleus sampling mass, in (0, 1].")
    top_k: int | None = _f(None, "Sample from the k likeliest tokens; None: all.")
    min_p: float | None = _f(None, "Minimum token probability relative to the top one.")
    repetition_penalty: float = _f(1.0, "Penalty for repeated tokens (1.0: none).")
    sampling_seeds: str = _f(
        "rollout",
        "'rollout': every request carries a seed derived from seed, batch and slot in group, so a "
        "seeded run samples the same rollouts again; 'none': no seed is sent (the server's own "
        "random stream: not reproducible, but vLLM's GPU sampler skips its per-request loop).",
    )
    presence_penalty: float = _f(0.0, "OpenAI presence penalty, in [-2, 2].")
    frequency_penalty: float = _f(0.0, "OpenAI frequency penalty, in [-2, 2].")

    # Generation batches and the background generator.
    generation_batch_size: int | None = _f(
        None,
        "Samples per generation batch = per_device_train_batch_size × processes × steps_per_generation; "
        "None: derived from steps_per_generation. Give at most one of the two.",
    )
    steps_per_generation: int | None = _f(
        None,
        "Micro-steps trained per generation batch (a multiple of gradient_accumulation_steps); "
        "None: gradient_accumulation_steps (one generation batch per optimizer step).",
    )
    max_concurrent: int = _f(1024, "Most rollouts in flight at once.")
    num_batches_ahead: int = _f(
        1, "Generation batches produced ahead of training (0: synchronous); also the staleness bound."
    )
    server_sleep_during_step: bool = _f(
        False,
        "Free the vf-vllm server's KV cache while each step trains (vLLM's sleep mode; the server "
        "must run with --enable-sleep-mode): for a server on the trainer's GPU. Needs "
        "num_batches_ahead=0 (nothing is generated during the step).",
    )
    cpu_phases: str = _f(
        "auto",
        "When the vLLM server computes on this machine's CPU, as the trainer does: 'auto' or 'exclusive' "
        "generate the next batch only after each step's training and weight sync (num_batches_ahead acts "
        "as 0), so each phase gets every core; 'overlap' generates ahead as num_batches_ahead says. "
        "'auto' overlaps otherwise (GPU or remote server), 'exclusive' never does.",
    )
    async_generation_timeout: float = _f(
        600.0,
        "Seconds one generation batch may take; a batch that takes longer is regenerated from the "
        "same prompts (twice at most), then the run fails.",
    )
    async_max_queue_size: int | None = _f(
        None, "Most finished batches waiting to be trained; None: sized from num_batches_ahead."
    )
    max_filter_rounds: int = _f(
        2, "Extra generation rounds to replace filtered groups before training on what is left."
    )

    # Inference server.
    vllm_server_host: str = _f("127.0.0.1", "Host of the vf-vllm server (loopback by default).")
    vllm_server_port: int = _f(8000, "Port of the vf-vllm server.")
    vllm_server_timeout: float = _f(300.0, "Seconds to wait for the vf-vllm server to become ready.")
    ds3_gather_for_generation: bool = _f(
        True,
        "Under DeepSpeed ZeRO-3, gather a few parameters at a time to sync weights to the server; "
        "False: one parameter at a time (least memory on each GPU, slowest sync).",
    )
    sync_weights_timeout: float = _f(
        300.0, "Seconds one weight (or adapter) sync to the server may take before failing."
    )
    ddp_timeout: int | None = _f(
        None,
        "Seconds a collective between training processes may wait; it must outlast what the main "
        "process does alone: max(sync_weights_timeout, async_generation_timeout) + 30. None: that, "
        "and at least 1800 (a checkpoint write). Waits for the server and for batches never count.",
    )
    lora_sync: str = _f(
        "auto",
        "How a PEFT model reaches the server: 'adapter' (only the LoRA tensors; the server needs "
        "--enable-lora), 'merged' (full weights with the adapter folded in), or 'auto': 'adapter' "
        "on a GPU server, 'merged' on a CPU one, where vLLM runs LoRA through slow fallback kernels.",
    )

    # Objective.
    beta: float = _f(0.001, "Weight of the k3 KL penalty to the reference model (0: off).")
    num_iterations: int = _f(1, "Optimization passes over each generation batch.")
    epsilon: float = _f(0.2, "Lower clip: the ratio is clipped at 1 - epsilon (0 < ε < 1).")
    epsilon_high: float | None = _f(
        None, "Upper clip: 1 + epsilon_high; None: epsilon, or 0.28 (the paper's) for loss_type 'dapo'."
    )
    delta: float | None = _f(
        None, "Two-sided clipping: cap on the ratio when the advantage is negative (> 1 + epsilon_high)."
    )
    scale_rewards: bool = _f(False, "Divide advantages by their group's reward std.")
    loss_type: str = _f("dr_grpo", f"Loss aggregation, one of: {', '.join(LOSS_TYPES)}.")
    importance_sampling_cap: float | None = _f(
        DEFAULT_IS_CAP,
        "Truncated importance sampling: the per-token weight trainer/server probability is capped here "
        "(>= 1); None: no cap.",
    )
    importance_sampling_mask_low: float | None = _f(
        DEFAULT_IS_MASK_BAND[0],
        "Tokens whose importance weight is below this (< 1) are left out of the loss; None: keep.",
    )
    importance_sampling_mask_high: float | None = _f(
        DEFAULT_IS_MASK_BAND[1],
        "Tokens whose importance weight is above this (> 1) are left out of the loss; None: keep.",
    )

    # Difficulty filtering.
    filter_zero_std_groups: bool = _f(
        False, "Drop groups whose rewards are all equal (zero advantage, no signal)."
    )
    min_group_mean_reward: float | None = _f(
        None, "Drop groups whose mean reward is below this (too hard); None: no bound."
    )
    max_group_mean_reward: float | None = _f(
        None, "Drop groups whose mean reward is above this (too easy); None: no bound."
    )

    # Masking of completion tokens.
    mask_env_responses: bool = _f(True, "Exclude environment tokens from the loss.")
    mask_truncated_completions: bool = _f(True, "Exclude completions cut at the length limit from the loss.")
    zero_truncated_completions: bool = _f(False, "Give completions cut at the length limit reward 0.")

    # Reference model.
    sync_ref_model: bool = _f(True, "Periodically move the reference toward the policy.")
    ref_model_mixup_alpha: float = _f(
        0.5, "Reference update: ref = alpha × policy + (1 - alpha) × ref, alpha in [0, 1]."
    )
    ref_model_sync_steps: int = _f(100, "Optimizer steps between reference updates.")

    # Evaluation (TrainingArguments' field, given its meaning for rollouts).
    per_device_eval_batch_size: int | None = _f(
        None,
        "Eval rollouts in flight at once per training process (evaluation generates through the "
        "server from the main process); None: max_concurrent.",
    )

    # Logging and data.
    log_completions: bool = _f(False, "Log a table of sample completions.")
    num_completions_to_print: int | None = _f(None, "Rows in the sample table; None: all of the batch.")
    shuffle_dataset: bool = _f(True, "Shuffle the prompt dataset each epoch.")

    def __new__(cls, *args: Any, **kwargs: Any) -> GRPOConfig:
        # A TRL field (use_vllm=True, ...) or a typo gets one line with the fix, not a bare TypeError.
        # __new__ sees the same keywords as the dataclass __init__, which stays the generated one.
        refuse_unknown_fields(kwargs, _field_names(cls))
        return super().__new__(cls)

    def __post_init__(self) -> None:
        given = {name: getattr(self, name) for name in DERIVED_FIELDS}
        self._derive_fields(given)
        validate_fields(self)
        cpu_distributed_backend(self)
        try:
            super().__post_init__()
        except ConfigError:
            raise
        except ValueError as err:  # TrainingArguments' own checks: the same kind of bad input
            raise training_args_error(self, err) from None
        self._derive_layout(given)
        # What was derived rather than given: a plain record, read by assigned.py to tell a value
        # assigned after construction (kept) from one still as derived (derived again).
        self._derived = {name: getattr(self, name) for name, value in given.items() if value is None}

    def resolve(self) -> GRPOConfig:
        """A new ``GRPOConfig`` checked and derived from the values now on this one (which is unchanged).

        ``GRPOTrainer`` trains with it, so fields assigned after construction are
        validated and honoured (``assigned.resolved_config``). Raises ``ConfigError``
        like the constructor.
        """
        return resolved_config(self)

    def _derive_fields(self, given: dict[str, Any]) -> None:
        """``max_prompt_length``, ``epsilon_high``, ``ddp_timeout`` from the given values.

        ``max_tokens`` (per turn) and ``max_completion_length`` (the whole rollout) are two
        limits, kept as given: the first turn may use at most the smaller of the two.
        """
        tokens, completion = given["max_tokens"], given["max_completion_length"]
        if completion is not None:
            at_least("max_completion_length", completion, 1, "or None for no cap on a rollout's completion")
        self.max_tokens = tokens
        self.max_completion_length = completion
        if self.stop is not None:
            if isinstance(self.stop, str):  # one string, as OpenAI's API also takes it
                self.stop = [self.stop]
            elif not all(isinstance(s, str) and s for s in self.stop):
                fail(f"stop={self.stop!r} must be a list of non-empty strings", 'e.g. stop = ["</answer>"]')
        prompt = given["max_prompt_length"]
        if prompt is None and isinstance(self.max_seq_len, int):  # a bad max_seq_len fails validation
            prompt = default_max_prompt_length(self.max_seq_len)
        self.max_prompt_length = prompt
        self.scale_rewards = scale_rewards_flag(self.scale_rewards)
        high = given["epsilon_high"]
        if high is None:
            high = DAPO_EPSILON_HIGH if self.loss_type == "dapo" else self.epsilon
        self.epsilon_high = high
        timeout = given["ddp_timeout"]
        self.ddp_timeout = collective_timeout(self) if timeout is None else timeout

    def _derive_layout(self, given: dict[str, Any]) -> None:
        layout = resolve_batch_layout(
            per_device_train_batch_size=self.per_device_train_batch_size,
            num_processes=self.world_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            num_generations=self.num_generations,
            generation_batch_size=given["generation_batch_size"],
            steps_per_generation=given["steps_per_generation"],
        )
        self.generation_batch_size = layout[0]
        self.steps_per_generation = layout[1]

    @property
    def eval_batch_size(self) -> int:
        """Eval rollouts in flight per process: ``per_device_eval_batch_size``, else ``max_concurrent``."""
        per_device = self.per_device_eval_batch_size
        return self.max_concurrent if per_device is None else per_device

    # -- derived numbers: read from the fields, never set ---------------------------------------
    @property
    def plan(self) -> GenerationPlan:
        """How generation batches map to optimizer steps (``generation_plan``, config/batch_layout.py)."""
        return plan_of(self)

    @property
    def tickets_per_batch(self) -> int:
        """Step tickets (micro-steps) of one trained batch: its micro-batches, each trained
        ``num_iterations`` times."""
        return self.plan.micro_steps * self.num_iterations

    @property
    def longest_completion(self) -> int:
        """The longest completion a sample can have: ``dr_grpo``'s constant normalizer."""
        return self.max_completion_length or self.max_tokens or (self.max_seq_len - self.max_prompt_length)

    @property
    def difficulty_filtering(self) -> bool:
        """Whether any group filter is on (zero-std groups or a mean-reward band)."""
        return self.filter_zero_std_groups or (
            self.min_group_mean_reward is not None or self.max_group_mean_reward is not None
        )


@functools.cache
def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in dataclasses.fields(cls) if f.init)


def field_default(name: str) -> Any:
    """``GRPOConfig``'s own default of field ``name`` (KeyError for a field with none)."""
    f = GRPOConfig.__dataclass_fields__[name]
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    if f.default is dataclasses.MISSING:
        raise KeyError(f"GRPOConfig.{name} has no plain default")
    return f.default


def preset_default(preset: str, name: str) -> Any:
    """The default ``name`` gets under ``preset``: the presets table's value, else the field's own.

    ``AUTO`` is returned as ``None`` (an RLConfig field: None = decide at ``to_grpo_config``).
    """
    value = preset_value(preset, name)
    if value is FIELD:
        return field_default(name)
    return None if value is AUTO else value


def default_max_prompt_length(max_seq_len: int) -> int:
    """``max_prompt_length`` when none is given: 512, but at most half of ``max_seq_len``,
    so a short ``max_seq_len`` (e.g. 512) leaves room for the completion instead of failing."""
    return max(1, min(DEFAULT_MAX_PROMPT_LENGTH, max_seq_len // 2))


def grpo_defaults(run_name: str, preset: str = "default", **overrides: Any) -> GRPOConfig:
    """A ``GRPOConfig`` with a preset's settings, ``overrides`` applied on top.

    The presets are columns of the table in ``presets.py`` (each value with its reason).
    ``"default"``: the values 0.1.x scripts rely on (learning rate 1e-6, 10 warm-up steps,
    ``max_grad_norm`` 0.01, ``max_seq_len`` 4096, gradient checkpointing, W&B).
    ``"small"`` (also vf-rl's defaults, with LoRA on top): LoRA on a small model on one
    machine, as the shipped examples train (no warm-up, ``max_grad_norm`` 1.0, no KL term,
    ``max_seq_len`` 2048, a checkpoint every 50 steps, no reporting).
    Both: a step is 4 prompts × 8 completions, in bf16 where the hardware has it.

    Never fails for lack of hardware. ``bf16`` left to the preset (AUTO): on a bf16-capable
    GPU; on a machine without CUDA where this CPU's bf16 matmul is clearly faster than its fp32
    (measured once, utils/compute_dtype.py; then ``use_cpu=True`` for accelerate's CPU autocast,
    with fp32 master weights), else fp32; one line says which. ``bf16=True`` given on a machine
    without CUDA trains under CPU bf16 autocast as asked (fp32 with one warning under DeepSpeed,
    whose CPU bf16 path is untested here, or on a GPU without bf16). The preset's ``report_to="wandb"`` without wandb installed reports to
    tensorboard if installed, else nowhere (one warning); a ``report_to`` naming wandb given
    here is refused in one line instead. Checkpoints hold the model only
    (``save_only_model=True``); pass ``False`` to resume exactly.
    """
    if preset not in GRPO_DEFAULTS_PRESETS:
        raise ConfigError(
            f"grpo_defaults: unknown preset {preset!r}", hint=f"use one of {sorted(GRPO_DEFAULTS_PRESETS)}"
        )
    args: dict[str, Any] = dict(output_dir=f"outputs/{run_name}", run_name=run_name, **preset_values(preset))
    if "report_to" in overrides:  # the user's own choice: refused, not replaced, when wandb is missing
        check_report_to(overrides["report_to"], "report_to")
    args.update(overrides)
    resolve_bf16(args)
    args["report_to"] = _available_report_to(args.get("report_to"))
    return GRPOConfig(**args)


GRPO_DEFAULTS_PRESETS = ("default", "small")  # the columns of presets.PRESET_TABLE grpo_defaults takes


def _bf16_accelerator() -> bool:
    from transformers.utils import is_torch_bf16_gpu_available

    return bool(is_torch_bf16_gpu_available())


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def resolve_bf16(args: dict[str, Any]) -> None:
    """``args["bf16"]`` (and ``use_cpu`` for CPU autocast) as the machine allows, in place; see
    ``grpo_defaults`` (RLConfig.to_grpo_config resolves its AUTO the same way)."""
    from verifiers.training.config.presets import bf16_auto

    cuda = _cuda()
    if args.get("bf16") is AUTO:
        choice = bf16_auto(cuda, cuda and _bf16_accelerator(), deepspeed_launched(args))
        (logger.warning if choice.warn else logger.info)("bf16: %s", choice.line)
        args["bf16"] = choice.bf16
        if choice.use_cpu and args.get("use_cpu") is None:
            args["use_cpu"] = True
        return
    if not args.get("bf16"):
        return
    if cuda and not _bf16_accelerator():
        reason = "this GPU has no bf16"
    elif not cuda and deepspeed_launched(args):
        reason = "DeepSpeed on CPU runs without bf16 here"
    else:
        if not cuda and args.get("use_cpu") is None:
            args["use_cpu"] = True  # bf16 asked on a CPU-only machine: accelerate's CPU autocast
        return
    warn_once(logger, "grpo_defaults.bf16", "bf16=True: %s; training in fp32 (bf16=False)", reason)
    args["bf16"] = False


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def _available_report_to(report_to: str | list[str] | None) -> str | list[str] | None:
    """Replace ``wandb`` by tensorboard (or nothing) when wandb is not installed."""
    targets = [report_to] if isinstance(report_to, str) else list(report_to or [])
    if "wandb" not in targets or _installed("wandb"):
        return report_to
    has_tb = _installed("tensorboard") or _installed("tensorboardX")
    fallback = "tensorboard" if has_tb else None
    warn_once(
        logger,
        "grpo_defaults.report_to",
        "report_to includes 'wandb' but wandb is not installed: reporting to %s (pip install wandb to use it)",
        fallback or "nothing",
    )
    rest = [t for t in targets if t not in ("wandb", fallback)] + ([fallback] if fallback else [])
    return rest or "none"
