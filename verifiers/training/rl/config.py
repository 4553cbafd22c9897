"""``RLConfig`` and ``RLTrainer``: the LoRA-first front door onto ``GRPOTrainer``.

``RLConfig`` is a thin preset over ``GRPOConfig``: it counts batches in rollouts and
uses the names of the one-TOML launcher (``vf-rl``). Every field that is a
``GRPOConfig`` field (under its own name or one below) takes its default from the
``"rl"`` column of the presets table (``config/presets.py``, each difference with its
reason), else ``GRPOConfig``'s own, and its help from ``GRPOConfig``.
:meth:`RLConfig.to_grpo_config` translates it into a ``GRPOConfig``; RLConfig checks no
field itself: the rules live in ``config/rules.py`` (and ``batch_layout.py``), and an
error names the field as RLConfig calls it (``rules.renamed``). ``RLTrainer``
*is* a ``GRPOTrainer``: it only loads the model from a name, hands the LoRA config
over, and prints the lines users expect.

Mapping (RLConfig -> GRPOConfig), with P training processes (``batch_layout.rollout_layout``):

    rollouts_per_example   -> num_generations
    micro_batch_size       -> per_device_train_batch_size
    batch_size             -> gradient_accumulation_steps = batch_size / (micro_batch_size × P)
    max_prompt_len         -> max_prompt_length
    generation_timeout     -> async_generation_timeout
    use_lora, lora_*       -> peft_config (lora_defaults)
    log_samples_every      -> log_completions, switched on every N steps
    num_samples_to_print   -> num_completions_to_print
    wandb_project/name     -> $WANDB_PROJECT / $WANDB_NAME / $WANDB_ENTITY
    grpo_args              -> any other GRPOConfig field, as given
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback

from verifiers.errors import ConfigError, nearest
from verifiers.training.config.batch_layout import check_batch_sizes, rollout_layout
from verifiers.training.config.fields import GRPOConfig, preset_default, resolve_bf16
from verifiers.training.config.lora import LORA_TARGET_MODULES, check_lora_settings, lora_defaults
from verifiers.training.config.presets import AUTO, preset_values
from verifiers.training.config.rules import check_entry_fields, check_report_to, check_wandb_settings, renamed
from verifiers.training.rl.output import SampleSchedule, StepLogger

# GRPOConfig fields that RLConfig sets under another name: giving them directly
# would disagree with the rollout counts, so they are refused with the name to use.
RENAMED_GRPO_FIELDS: dict[str, str] = {
    "num_generations": "rollouts_per_example",
    "per_device_train_batch_size": "micro_batch_size",
    "gradient_accumulation_steps": "batch_size",
    "max_prompt_length": "max_prompt_len",
    "async_generation_timeout": "generation_timeout",
    "log_completions": "log_samples_every",
}
# The GRPOConfig names RLConfig's errors translate (rules.renamed): the fields whose value is
# the same under both names (batch_size and log_samples_every are counted differently).
ERROR_NAMES: dict[str, str] = {
    grpo: own
    for grpo, own in RENAMED_GRPO_FIELDS.items()
    if grpo not in ("gradient_accumulation_steps", "log_completions")
} | {"num_completions_to_print": "num_samples_to_print"}


def _grpo(name: str) -> Any:
    """An RLConfig field that is GRPOConfig's ``name`` (maybe renamed here): the presets table's
    "rl" default (else GRPOConfig's own) and GRPOConfig's help, read from there rather than copied."""
    help_text = GRPOConfig.__dataclass_fields__[name].metadata.get("help", "")
    return field(default=preset_default("rl", name), metadata={"help": help_text, "grpo": name})


def _own(default: Any, help_text: str, **kwargs: Any) -> Any:
    """A field RLConfig adds (rollout counts, LoRA, W&B, printing), with its help."""
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help_text})
    return field(default=default, metadata={"help": help_text}, **kwargs)


def launched_world_size() -> int:
    """Processes of this training run (``$WORLD_SIZE``, set by accelerate/torchrun; else 1)."""
    try:
        return max(1, int(os.environ.get("WORLD_SIZE", "1")))
    except ValueError:
        return 1


def grpo_field_names() -> set[str]:
    """Every ``GRPOConfig`` field that ``grpo_args`` may set."""
    return {f.name for f in dataclasses.fields(GRPOConfig) if f.init} - set(RENAMED_GRPO_FIELDS)


def _lora_default(parameter: str) -> Any:
    """``lora_defaults``' own default for ``parameter``: the LoRA defaults are defined there, once."""
    return inspect.signature(lora_defaults).parameters[parameter].default


@dataclass
class RLConfig:
    """Training settings counted in rollouts; see the module docstring for how they map onto GRPOConfig."""

    # Run and outputs.
    run_name: str = _own("rl-run", "Name of the run (W&B, outputs/<run_name>).")
    output_dir: str | None = _own(None, "Where checkpoints and logs go; None: outputs/<run_name>.")

    # Batches, counted in rollouts.
    rollouts_per_example: int = _grpo("num_generations")
    micro_batch_size: int = _grpo("per_device_train_batch_size")
    batch_size: int = _own(
        # the table's samples a step: micro_batch_size × gradient_accumulation_steps (one process)
        preset_default("rl", "per_device_train_batch_size")
        * preset_default("rl", "gradient_accumulation_steps"),
        "Rollouts per optimizer step, all processes together (a multiple of micro_batch_size × processes).",
    )
    max_steps: int = _grpo("max_steps")

    # Lengths in tokens.
    max_tokens: int | None = _grpo("max_tokens")
    max_seq_len: int = _grpo("max_seq_len")
    max_prompt_len: int | None = _grpo("max_prompt_length")

    # Optimizer.
    learning_rate: float = _grpo("learning_rate")
    lr_scheduler_type: str = _grpo("lr_scheduler_type")
    warmup_steps: int = _grpo("warmup_steps")
    max_grad_norm: float = _grpo("max_grad_norm")
    weight_decay: float = _grpo("weight_decay")
    bf16: bool | None = _own(
        None,
        "Train in bf16; None: on a bf16-capable GPU, or a CPU whose bf16 matmul is clearly faster (measured).",
    )
    gradient_checkpointing: bool = _grpo("gradient_checkpointing")

    # Objective.
    loss_type: str = _grpo("loss_type")
    beta: float = _grpo("beta")
    num_iterations: int = _grpo("num_iterations")
    num_batches_ahead: int = _grpo("num_batches_ahead")
    cpu_phases: str = _grpo("cpu_phases")

    # Sampling.
    temperature: float = _grpo("temperature")
    top_p: float = _grpo("top_p")
    top_k: int | None = _grpo("top_k")
    min_p: float | None = _grpo("min_p")
    repetition_penalty: float = _grpo("repetition_penalty")
    stop: list[str] | None = _grpo("stop")

    # LoRA.
    use_lora: bool = _own(True, "Train a LoRA adapter (False: the full model).")
    lora_rank: int = _own(_lora_default("r"), "LoRA rank r.")
    lora_alpha: float = _own(_lora_default("alpha"), "LoRA scale alpha (the update is scaled by alpha / r).")
    lora_dropout: float = _own(_lora_default("dropout"), "Dropout on the LoRA input, in [0, 1).")
    lora_target_modules: list[str] | str | None = _own(
        None,
        'Modules LoRA adapts; None: q_proj, k_proj, v_proj, o_proj; a string is PEFT\'s: "all-linear" '
        "or a regular expression.",
    )

    # Inference server.
    vllm_server_host: str = _grpo("vllm_server_host")
    vllm_server_port: int = _grpo("vllm_server_port")
    vllm_server_timeout: float = _grpo("vllm_server_timeout")
    generation_timeout: float = _grpo("async_generation_timeout")
    max_concurrent: int = _grpo("max_concurrent")

    # Evaluation, checkpoints, logging.
    eval_strategy: str = _grpo("eval_strategy")
    eval_steps: int | None = _grpo("eval_steps")
    save_steps: int = _grpo("save_steps")
    logging_steps: int = _grpo("logging_steps")
    log_samples_every: int = _own(10, "Print a block of sample rollouts every N steps; 0: never.")
    num_samples_to_print: int = _own(
        preset_default("rl", "num_completions_to_print"), "Rows in each sample block."
    )
    report_to: str | list[str] = _grpo("report_to")
    wandb_project: str | None = _own(None, "W&B project ($WANDB_PROJECT); needs report_to = 'wandb'.")
    wandb_name: str | None = _own(None, "W&B run name ($WANDB_NAME); needs report_to = 'wandb'.")
    wandb_entity: str | None = _own(None, "W&B entity ($WANDB_ENTITY); needs report_to = 'wandb'.")

    # Any other GRPOConfig field (e.g. epsilon, seed, save_total_limit), passed through as given.
    grpo_args: dict[str, Any] = _own({}, "Any other GRPOConfig field (e.g. epsilon, seed), as given.")

    def __post_init__(self) -> None:
        if self.output_dir is None and isinstance(self.run_name, str):
            self.output_dir = os.path.join("outputs", self.run_name)
        # The rollout counts first, in RLConfig's own terms (batch_layout.py's rule).
        check_batch_sizes(self.batch_size, self.micro_batch_size, self.rollouts_per_example)
        check_wandb_settings(
            self.report_to, {n: getattr(self, n) for n in ("wandb_project", "wandb_name", "wandb_entity")}
        )
        seq = self.max_seq_len
        if self.max_tokens == _DEFAULT_MAX_TOKENS and isinstance(seq, int) and seq <= _DEFAULT_MAX_TOKENS:
            # The default per-turn limit does not fit a short max_seq_len: the sequence bounds the turn.
            self.max_tokens = None
        if self.use_lora:  # LoRA's rules, in RLConfig's names
            check_lora_settings(
                self.lora_rank,
                self.lora_alpha,
                self.lora_dropout,
                self.lora_target_modules,
                names=("lora_rank", "lora_alpha", "lora_dropout"),
            )
        self._check_grpo_args()
        with renamed(ERROR_NAMES):
            # The entry-point rules (config/rules.py), then every GRPOConfig rule on the config this
            # stands for; wandb is only needed once training starts (to_grpo_config).
            check_entry_fields(
                {
                    **self._grpo_values(),
                    "run_name": self.run_name,
                    "log_samples_every": self.log_samples_every,
                }
            )
            GRPOConfig(**self._grpo_kwargs(launched_world_size()))

    def _check_grpo_args(self) -> None:
        own = {f.name for f in dataclasses.fields(self)} - {"grpo_args"}
        allowed = grpo_field_names()
        for key in self.grpo_args:
            if key in RENAMED_GRPO_FIELDS:
                raise ConfigError(
                    f"grpo_args sets '{key}', which RLConfig sets from '{RENAMED_GRPO_FIELDS[key]}'",
                    hint=f"set RLConfig.{RENAMED_GRPO_FIELDS[key]} instead",
                )
            if key in own:
                raise ConfigError(
                    f"grpo_args sets '{key}', an RLConfig field", hint=f"set RLConfig.{key} instead"
                )
            if key not in allowed:
                guess = nearest(key, own | allowed)
                raise ConfigError(
                    f"unknown key '{key}' in grpo_args" + (f"; did you mean '{guess}'?" if guess else ""),
                    hint=None if guess else "grpo_args takes GRPOConfig fields",
                )

    @property
    def target_modules(self) -> list[str] | str:
        """The modules LoRA adapts: the list given (or the default), or PEFT's string as is."""
        if isinstance(self.lora_target_modules, str):
            return self.lora_target_modules
        return list(self.lora_target_modules or LORA_TARGET_MODULES)

    def lora_config(self) -> Any:
        """The peft ``LoraConfig`` for ``use_lora`` (None when LoRA is off)."""
        if not self.use_lora:
            return None
        return lora_defaults(
            r=self.lora_rank,
            alpha=self.lora_alpha,
            dropout=self.lora_dropout,
            target_modules=self.target_modules,
        )

    def wandb_environment(self) -> dict[str, str]:
        """The W&B variables this config sets for the run (none unless ``report_to`` includes wandb)."""
        if "wandb" not in _targets(self.report_to):
            return {}
        names = (
            ("WANDB_PROJECT", self.wandb_project),
            ("WANDB_NAME", self.wandb_name),
            ("WANDB_ENTITY", self.wandb_entity),
        )
        return {var: value for var, value in names if value}

    def callbacks(self) -> list[TrainerCallback]:
        """The callbacks ``RLTrainer`` adds: the step line / metrics file and the sample schedule."""
        return [StepLogger(self.output_dir), SampleSchedule(self.log_samples_every)]

    def to_grpo_config(self, world_size: int | None = None) -> GRPOConfig:
        """The ``GRPOConfig`` this config stands for, for ``world_size`` training processes.

        ``world_size`` defaults to this run's (``$WORLD_SIZE``). A launcher validating a
        multi-process run from one process (``vf-rl``) passes the planned count: the
        processes are folded into the per-device batch so every rule sees the same
        global batch sizes.
        """
        check_report_to(self.report_to)
        with renamed(ERROR_NAMES):
            return GRPOConfig(**self._grpo_kwargs(world_size))

    def _grpo_values(self) -> dict[str, Any]:
        """This config's GRPOConfig fields, under GRPOConfig's names (grpo_args included)."""
        values = {
            f.metadata["grpo"]: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if "grpo" in f.metadata
        }
        return {**values, **self.grpo_args}

    def _grpo_kwargs(self, world_size: int | None) -> dict[str, Any]:
        actual = launched_world_size()
        planned = world_size or actual
        layout = rollout_layout(self.batch_size, self.micro_batch_size, self.rollouts_per_example, planned)
        if planned % actual:
            raise ConfigError(f"cannot lay out {planned} planned processes over {actual} running ones")
        bf16 = AUTO if self.bf16 is None else self.bf16  # None: the table's AUTO
        # The table's "rl" values of fields RLConfig does not expose, then every field that is a
        # GRPOConfig field, under its GRPOConfig name; the batch sizes from the layout.
        kwargs: dict[str, Any] = {
            name: value
            for name, value in preset_values("rl").items()
            if name not in _EXPOSED and value is not AUTO
        }
        kwargs.update(
            (f.metadata["grpo"], getattr(self, f.name))
            for f in dataclasses.fields(self)
            if "grpo" in f.metadata
        )
        kwargs.update(
            output_dir=self.output_dir,
            run_name=self.run_name,
            num_generations=layout.num_generations,
            per_device_train_batch_size=layout.per_device_train_batch_size * planned // actual,
            gradient_accumulation_steps=layout.gradient_accumulation_steps,
            bf16=bf16,
            log_completions=self.log_samples_every > 0,
            num_completions_to_print=self.num_samples_to_print,
        )
        if self.gradient_checkpointing:
            # Non-reentrant checkpointing gives LoRA adapters gradients without
            # requiring grads on the (frozen) input embeddings.
            kwargs["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
        kwargs.update(self.grpo_args)
        resolve_bf16(kwargs)  # AUTO as the machine allows (and use_cpu for CPU autocast), as grpo_defaults
        return kwargs


_DEFAULT_MAX_TOKENS = preset_default("rl", "max_tokens")
# GRPOConfig fields RLConfig sets from its own fields (the table's "rl" values reach them as defaults).
_EXPOSED = {f.metadata["grpo"] for f in dataclasses.fields(RLConfig) if "grpo" in f.metadata} | {
    "gradient_accumulation_steps",
    "log_completions",
    "num_completions_to_print",
    "bf16",
}


def _targets(report_to: str | list[str] | None) -> list[str]:
    return [report_to] if isinstance(report_to, str) else list(report_to or [])
