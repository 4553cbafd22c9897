"""``GRPOConfig`` (a ``transformers.TrainingArguments``) and ``grpo_defaults``.

Every training field is declared here once, with its default and its help; ``RLConfig``
(rl.py), ``grpo_defaults`` and the ``vf-rl`` TOML (cli/toml_schema.py) read them from here.
The batch layout rule lives in ``batch_layout.py``, the field checks in ``config_rules.py``,
LoRA in ``lora.py`` (``lora_defaults`` is re-exported here).

Settings assigned after construction (``args = grpo_defaults(...)`` then
``args.num_generations = 12``, the 0.1.x habit) are honoured: ``GRPOTrainer``
calls :meth:`GRPOConfig.resolve`, which re-runs every check and re-derives every
value that ``__post_init__`` derived (batch layout, ``epsilon_high``,
``max_prompt_length``, ``max_tokens``) from the values then on the object. A
value the user gave, at construction or by assignment, is kept; one that was
only derived is derived again.
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
from verifiers.training.config.batch_layout import resolve_batch_layout
from verifiers.training.config.rules import (
    LORA_SYNC_MODES,
    at_least,
    fail,
    training_args_error,
    validate_fields,
)
from verifiers.training.config.lora import LORA_TARGET_MODULES, check_lora_settings, lora_defaults
from verifiers.training.loss.losses import DEFAULT_IS_CAP, DEFAULT_IS_MASK_BAND, LOSS_TYPES
from verifiers.training.lifecycle.processes import (
    apply_collective_timeout,
    collective_timeout,
    cpu_distributed_backend,
    destroy_group_at_exit,
)
from verifiers.training.config.trl_names import refuse_unknown_fields, scale_rewards_flag
from verifiers.utils.logging import warn_once

logger = logging.getLogger(__name__)

DAPO_EPSILON_HIGH = 0.28  # the DAPO paper's clip-higher bound
DEFAULT_MAX_PROMPT_LENGTH = 512  # capped at max_seq_len // 2 (default_max_prompt_length)
# Fields whose stored value may be derived from others (None = derive). The user's own
# values live in ``_given`` so ``resolve`` can tell a choice from a derivation.
DERIVED_FIELDS = (
    "generation_batch_size",
    "steps_per_generation",
    "epsilon_high",
    "max_prompt_length",
    "max_tokens",
    "max_completion_length",
    "eval_steps",  # TrainingArguments': None -> logging_steps under eval_strategy="steps"
    "ddp_timeout",  # None -> processes.collective_timeout
)
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

    def __post_init__(self) -> None:
        # The values as given; from the end of __post_init__ on, assignments to them are recorded.
        self.__dict__["_given"] = {name: getattr(self, name) for name in DERIVED_FIELDS}
        self._derive_fields()
        validate_fields(self)
        cpu_distributed_backend(self)
        try:
            super().__post_init__()
        except ConfigError:
            raise
        except ValueError as err:  # TrainingArguments' own checks: the same kind of bad input
            raise training_args_error(self, err) from None
        self._derive_layout()
        apply_collective_timeout(self.ddp_timeout)
        destroy_group_at_exit()
        self.__dict__["_recording"] = True

    def __setattr__(self, name: str, value: Any) -> None:
        # An assignment to a derived field after construction is the user's choice: remember it,
        # so resolve() keeps it instead of deriving the field again.
        if self.__dict__.get("_recording") and name in self.__dict__["_given"]:
            self.__dict__["_given"][name] = value
        super().__setattr__(name, value)

    def _store(self, name: str, value: Any) -> None:
        """Set a derived value without recording it as the user's."""
        object.__setattr__(self, name, value)

    def resolve(self) -> GRPOConfig:
        """Check and derive again from the values now on the object; returns ``self``.

        ``GRPOTrainer`` calls it, so fields assigned after construction are
        validated and honoured. Raises ``ConfigError`` like the constructor.
        """
        # A config unpickled from before resolve() existed has no record: take its values as given.
        self.__dict__.setdefault("_given", {name: getattr(self, name, None) for name in DERIVED_FIELDS})
        self.__dict__["_recording"] = False  # what resolve() itself sets is derived, not given
        try:
            self._derive_fields()
            validate_fields(self)
            self._derive_training_args()
            self._derive_layout()
            apply_collective_timeout(self.ddp_timeout)
            destroy_group_at_exit()
        finally:
            self.__dict__["_recording"] = True
        return self

    def _derive_training_args(self) -> None:
        """TrainingArguments' own conversions and derivations from fields a script may assign:
        choice strings to their enums (a bad one is refused), ``eval_steps`` from ``logging_steps``,
        ``report_to`` as a list, ``mixed_precision`` from ``bf16`` / ``fp16``, then its checks."""
        import os

        from transformers.trainer_utils import IntervalStrategy, SaveStrategy, SchedulerType
        from transformers.training_args import OptimizerNames

        kinds = (
            ("eval_strategy", IntervalStrategy),
            ("logging_strategy", IntervalStrategy),
            ("save_strategy", SaveStrategy),
            ("lr_scheduler_type", SchedulerType),
            ("optim", OptimizerNames),
        )
        try:
            for name, kind in kinds:
                self._store(name, kind(getattr(self, name)))
            eval_steps = self.__dict__["_given"]["eval_steps"]
            if self.eval_strategy == IntervalStrategy.STEPS and not eval_steps:
                eval_steps = self.logging_steps
            self._store("eval_steps", eval_steps)
            if self.eval_strategy != IntervalStrategy.NO:
                self.do_eval = True
            if self.report_to in ("none", ["none"]):
                self.report_to = []
            elif isinstance(self.report_to, str):
                self.report_to = [self.report_to]
            validate = getattr(super(), "_validate_args", None)  # transformers >= 5: its checks alone
            if callable(validate):
                validate()
        except ConfigError:
            raise
        except ValueError as err:
            raise training_args_error(self, err) from None
        precision = os.environ.get("ACCELERATE_MIXED_PRECISION", "no")
        precision = "fp16" if self.fp16 else "bf16" if self.bf16 else precision
        if precision != getattr(self, "mixed_precision", precision):  # bf16 / fp16 assigned
            self.mixed_precision = precision
            if getattr(self, "deepspeed_plugin", None) is not None:
                self.deepspeed_plugin.set_mixed_precision(precision)

    def _derive_fields(self) -> None:
        """``max_prompt_length``, ``epsilon_high``, ``ddp_timeout`` from the given values.

        ``max_tokens`` (per turn) and ``max_completion_length`` (the whole rollout) are two
        limits, kept as given: the first turn may use at most the smaller of the two.
        """
        given = self.__dict__["_given"]
        tokens, completion = given["max_tokens"], given["max_completion_length"]
        if completion is not None:
            at_least("max_completion_length", completion, 1, "or None for no cap on a rollout's completion")
        self._store("max_tokens", tokens)
        self._store("max_completion_length", completion)
        if self.stop is not None:
            if isinstance(self.stop, str):  # one string, as OpenAI's API also takes it
                self._store("stop", [self.stop])
            elif not all(isinstance(s, str) and s for s in self.stop):
                fail(f"stop={self.stop!r} must be a list of non-empty strings", 'e.g. stop = ["</answer>"]')
        prompt = given["max_prompt_length"]
        if prompt is None and isinstance(self.max_seq_len, int):  # a bad max_seq_len fails validation
            prompt = default_max_prompt_length(self.max_seq_len)
        self._store("max_prompt_length", prompt)
        self._store("scale_rewards", scale_rewards_flag(self.scale_rewards))
        high = given["epsilon_high"]
        if high is None:
            high = DAPO_EPSILON_HIGH if self.loss_type == "dapo" else self.epsilon
        self._store("epsilon_high", high)
        timeout = given["ddp_timeout"]
        self._store("ddp_timeout", collective_timeout(self) if timeout is None else timeout)

    def _derive_layout(self) -> None:
        given = self.__dict__["_given"]
        layout = resolve_batch_layout(
            per_device_train_batch_size=self.per_device_train_batch_size,
            num_processes=self.world_size,
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            num_generations=self.num_generations,
            generation_batch_size=given["generation_batch_size"],
            steps_per_generation=given["steps_per_generation"],
        )
        self._store("generation_batch_size", layout[0])
        self._store("steps_per_generation", layout[1])

    @property
    def eval_batch_size(self) -> int:
        """Eval rollouts in flight per process: ``per_device_eval_batch_size``, else ``max_concurrent``."""
        per_device = self.per_device_eval_batch_size
        return self.max_concurrent if per_device is None else per_device

    @property
    def difficulty_filtering(self) -> bool:
        """Whether any group filter is on (zero-std groups or a mean-reward band)."""
        return self.filter_zero_std_groups or (
            self.min_group_mean_reward is not None or self.max_group_mean_reward is not None
        )


_dataclass_init = GRPOConfig.__init__


@functools.wraps(_dataclass_init)
def _init_refusing_unknown_fields(self: GRPOConfig, *args: Any, **kwargs: Any) -> None:
    # A TRL field (use_vllm=True, ...) or a typo gets one line with the fix, not a bare TypeError.
    refuse_unknown_fields(kwargs, _FIELD_NAMES)
    _dataclass_init(self, *args, **kwargs)


_FIELD_NAMES = frozenset(f.name for f in dataclasses.fields(GRPOConfig) if f.init)
GRPOConfig.__init__ = _init_refusing_unknown_fields  # type: ignore[method-assign]


def default_max_prompt_length(max_seq_len: int) -> int:
    """``max_prompt_length`` when none is given: 512, but at most half of ``max_seq_len``,
    so a short ``max_seq_len`` (e.g. 512) leaves room for the completion instead of failing."""
    return max(1, min(DEFAULT_MAX_PROMPT_LENGTH, max_seq_len // 2))


# The "small" preset on top of the field defaults: LoRA on a small model on one machine, as the
# shipped examples train (grpo_defaults(..., preset="small")) and vf-rl's RLConfig defaults (one copy).
RECOMMENDED: dict[str, Any] = dict(
    max_steps=500,
    lr_scheduler_type="constant_with_warmup",
    warmup_steps=0,  # with warm-up, constant_with_warmup trains step 1 at a learning rate of 0
    beta=0.0,  # no KL penalty: saves the reference model's forward pass (and its memory)
    save_strategy="steps",
    save_steps=50,  # the last step is saved too, whatever max_steps is
    logging_steps=1,
    report_to="none",  # "wandb" or "tensorboard" to report the metrics
)


def recommended(name: str) -> Any:
    """The recommended default of a ``GRPOConfig`` field: ``RECOMMENDED``'s, else the field's own."""
    if name in RECOMMENDED:
        return RECOMMENDED[name]
    default = GRPOConfig.__dataclass_fields__[name].default
    if default is dataclasses.MISSING:
        raise KeyError(f"GRPOConfig.{name} has no plain default")
    return default


# What grpo_defaults() gives without a preset: the values 0.1.x scripts were written against
# (shared/reference/api.md), on top of the field defaults.
GRPO_DEFAULTS: dict[str, Any] = dict(
    max_steps=500, lr_scheduler_type="constant_with_warmup", warmup_steps=10, max_grad_norm=0.01,
    max_seq_len=4096, gradient_checkpointing=True, save_strategy="steps", save_steps=500,
    logging_steps=1, report_to="wandb",
)  # fmt: skip
PRESETS: dict[str, dict[str, Any]] = {"default": GRPO_DEFAULTS, "small": RECOMMENDED}


def grpo_defaults(run_name: str, preset: str = "default", **overrides: Any) -> GRPOConfig:
    """A ``GRPOConfig`` with a preset's settings, ``overrides`` applied on top.

    ``"default"`` (:data:`GRPO_DEFAULTS`): the values 0.1.x scripts rely on (learning rate
    1e-6, 10 warm-up steps, ``max_grad_norm`` 0.01, ``max_seq_len`` 4096, gradient
    checkpointing, W&B). ``"small"`` (:data:`RECOMMENDED`, also vf-rl's defaults): LoRA on a
    small model on one machine, as the shipped examples train (no warm-up, ``max_grad_norm``
    1.0, no KL term, ``max_seq_len`` 2048, a checkpoint every 50 steps, no reporting).
    Both: a step is 4 prompts × 8 completions, in bf16 where the hardware has it.

    Never fails for lack of hardware or optional packages: without a bf16-capable
    accelerator it trains in fp32, and with ``report_to="wandb"`` but no wandb installed
    it reports to tensorboard if installed, else nowhere (one warning each). ``bf16=True``
    with ``use_cpu=True`` is kept (CPU bf16 autocast, asked for explicitly). Checkpoints
    hold the model only (``save_only_model=True``); pass ``False`` to resume exactly.
    """
    if preset not in PRESETS:
        raise ConfigError(f"grpo_defaults: unknown preset {preset!r}", hint=f"use one of {sorted(PRESETS)}")
    args: dict[str, Any] = dict(
        output_dir=f"outputs/{run_name}",
        run_name=run_name,
        **PRESETS[preset],
        bf16=True,
        gradient_accumulation_steps=4,
        save_only_model=True,
        log_on_each_node=False,
        log_completions=True,
    )
    args.update(overrides)
    if args.get("bf16") and not (args.get("use_cpu") and overrides.get("bf16")) and not _bf16_accelerator():
        warn_once(
            logger,
            "grpo_defaults.bf16",
            "no bf16-capable GPU found: training in fp32 (bf16=False); expect it to be slow on CPU",
        )
        args["bf16"] = False
    args["report_to"] = _available_report_to(args.get("report_to"))
    return GRPOConfig(**args)


def _bf16_accelerator() -> bool:
    from transformers.utils import is_torch_bf16_gpu_available

    return bool(is_torch_bf16_gpu_available())


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
