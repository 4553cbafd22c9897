"""``RLConfig`` and ``RLTrainer``: the LoRA-first front door onto ``GRPOTrainer``.

``RLConfig`` is a thin preset over ``GRPOConfig``: it counts batches in rollouts and
uses the names of the one-TOML launcher (``vf-rl``). Every field that is a
``GRPOConfig`` field (under its own name or one below) takes its default and its help
from ``GRPOConfig`` (``config.recommended``: ``RECOMMENDED``, else the field's own);
only ``LORA_PRESET`` differs, because the adapter trains at a LoRA learning rate.
:meth:`RLConfig.to_grpo_config` translates it into a ``GRPOConfig``, so every rule
below that line lives in one place (``config.py``, ``batch_layout.py``). ``RLTrainer``
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
import importlib.util
import os
from dataclasses import dataclass, field
from typing import Any

from transformers import TrainerCallback

from verifiers.errors import ConfigError, nearest
from verifiers.training.config.batch_layout import check_batch_sizes, rollout_layout  # noqa: F401 (re-exported)
from verifiers.training.config.fields import GRPOConfig, recommended
from verifiers.training.config.lora import LORA_TARGET_MODULES, check_lora_settings, lora_defaults
from verifiers.training.rl.output import (  # noqa: F401 (re-exported: rl.py's 0.2 names)
    METRICS_FILE,
    STEP_FIELDS,
    SampleSchedule,
    StepLogger,
    format_step_line,
    is_main_process,
    say,
)

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
# Where RLConfig's defaults differ from grpo_defaults(): it trains a LoRA adapter by default.
LORA_PRESET: dict[str, Any] = {
    "learning_rate": 1e-5,  # an adapter needs a larger step than the full model's 1e-6
    # importance-sampled policy gradient against the server's sampling log-probs, tokens
    # outside a ratio band masked: steady with num_batches_ahead=1 (one step off-policy)
    "loss_type": "cispo",
    "max_tokens": 512,  # per turn, as the guides say (None: up to max_seq_len)
}
DEFAULT_MAX_TOKENS = LORA_PRESET["max_tokens"]


def _grpo(name: str) -> Any:
    """An RLConfig field that is GRPOConfig's ``name`` (maybe renamed here): the preset's default,
    else the recommended one, and GRPOConfig's help, read from there rather than copied."""
    default = LORA_PRESET[name] if name in LORA_PRESET else recommended(name)
    help_text = GRPOConfig.__dataclass_fields__[name].metadata.get("help", "")
    return field(default=default, metadata={"help": help_text, "grpo": name})


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
        64,
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
    bf16: bool | None = _own(None, "Train in bf16; None: on when a bf16-capable GPU is present.")
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
    lora_rank: int = _own(8, "LoRA rank r.")
    lora_alpha: float = _own(16, "LoRA scale alpha (the update is scaled by alpha / r).")
    lora_dropout: float = _own(0.0, "Dropout on the LoRA input, in [0, 1).")
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
    num_samples_to_print: int = _own(2, "Rows in each sample block.")
    report_to: str | list[str] = _grpo("report_to")
    wandb_project: str | None = _own(None, "W&B project ($WANDB_PROJECT); needs report_to = 'wandb'.")
    wandb_name: str | None = _own(None, "W&B run name ($WANDB_NAME); needs report_to = 'wandb'.")
    wandb_entity: str | None = _own(None, "W&B entity ($WANDB_ENTITY); needs report_to = 'wandb'.")

    # Any other GRPOConfig field (e.g. epsilon, seed, save_total_limit), passed through as given.
    grpo_args: dict[str, Any] = _own({}, "Any other GRPOConfig field (e.g. epsilon, seed), as given.")

    def __post_init__(self) -> None:
        if not self.run_name or not isinstance(self.run_name, str):
            raise ConfigError(f"run_name={self.run_name!r} must be a non-empty string")
        if self.output_dir is None:
            self.output_dir = os.path.join("outputs", self.run_name)
        # The renamed fields are checked here, so their errors use the names users wrote;
        # the rest of the field rules run once, in GRPOConfig (to_grpo_config).
        check_batch_sizes(self.batch_size, self.micro_batch_size, self.rollouts_per_example)
        wandb_set = [n for n in ("wandb_project", "wandb_name", "wandb_entity") if getattr(self, n)]
        if wandb_set and "wandb" not in _targets(self.report_to):
            # They only reach W&B; without it they would be accepted and do nothing.
            raise ConfigError(
                f"{wandb_set[0]}={getattr(self, wandb_set[0])!r} is set but report_to={self.report_to!r} "
                "does not include 'wandb'",
                hint='add report_to = "wandb" (pip install wandb), or drop the W&B settings',
            )
        if self.rollouts_per_example < 2:
            raise ConfigError(
                f"rollouts_per_example={self.rollouts_per_example} must be >= 2",
                hint="a group needs 2+ rollouts to have a baseline",
            )
        _check_ranges(self)
        if self.max_prompt_len is not None and not 1 <= self.max_prompt_len < self.max_seq_len:
            raise ConfigError(
                f"max_prompt_len={self.max_prompt_len} must be >= 1 and < max_seq_len={self.max_seq_len}",
                hint="raise max_seq_len or lower max_prompt_len (None: min(512, max_seq_len // 2))",
            )
        if self.max_tokens == DEFAULT_MAX_TOKENS and self.max_seq_len <= DEFAULT_MAX_TOKENS:
            # The default per-turn limit does not fit a short max_seq_len: the sequence bounds the turn.
            self.max_tokens = None
        if self.max_tokens is not None and not 1 <= self.max_tokens < self.max_seq_len:
            raise ConfigError(
                f"max_tokens={self.max_tokens} must be >= 1 and < max_seq_len={self.max_seq_len}",
                hint="it is the per-turn limit; prompt and completion together must fit max_seq_len",
            )
        if self.use_lora:
            check_lora_settings(
                self.lora_rank,
                self.lora_alpha,
                self.lora_dropout,
                self.lora_target_modules,
                names=("lora_rank", "lora_alpha", "lora_dropout"),
            )
        self._check_grpo_args()

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
        actual = launched_world_size()
        planned = world_size or actual
        layout = rollout_layout(self.batch_size, self.micro_batch_size, self.rollouts_per_example, planned)
        if planned % actual:
            raise ConfigError(f"cannot lay out {planned} planned processes over {actual} running ones")
        if "wandb" in _targets(self.report_to) and importlib.util.find_spec("wandb") is None:
            raise ConfigError(
                "report_to includes 'wandb' but wandb is not installed", hint="pip install wandb"
            )
        bf16 = self.bf16
        if bf16 is None:
            from transformers.utils import is_torch_bf16_gpu_available

            bf16 = bool(is_torch_bf16_gpu_available())
        # Every field that is a GRPOConfig field, under its GRPOConfig name; the batch sizes from the layout.
        kwargs: dict[str, Any] = {
            f.metadata["grpo"]: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if "grpo" in f.metadata
        }
        kwargs.update(
            output_dir=self.output_dir,
            run_name=self.run_name,
            num_generations=layout.num_generations,
            per_device_train_batch_size=layout.per_device_train_batch_size * planned // actual,
            gradient_accumulation_steps=layout.gradient_accumulation_steps,
            bf16=bf16,
            save_strategy="steps",
            log_completions=self.log_samples_every > 0,
            num_completions_to_print=self.num_samples_to_print,
            # RLTrainer prints one line per step instead of a progress bar.
            disable_tqdm=True,
        )
        if self.gradient_checkpointing:
            # Non-reentrant checkpointing gives LoRA adapters gradients without
            # requiring grads on the (frozen) input embeddings.
            kwargs["gradient_checkpointing_kwargs"] = {"use_reentrant": False}
        kwargs.update(self.grpo_args)
        return GRPOConfig(**kwargs)


# RLConfig's numeric fields: (lowest, lowest allowed?, highest, highest allowed?, integer?, hint).
# None is allowed for the fields in _NONE_ALLOWED. Fields mapped onto GRPOConfig are checked
# there too; here they are refused where they are given, with RLConfig's names.
_RANGES: dict[str, tuple[float | None, bool, float | None, bool, bool, str]] = {
    "max_steps": (1, True, None, False, True, "the number of optimizer steps"),
    "max_seq_len": (2, True, None, False, True, "prompt and completion need a token each"),
    "learning_rate": (0, True, None, False, False, "e.g. 1e-5 with LoRA"),
    "warmup_steps": (0, True, None, False, True, "0 for no warm-up"),
    "max_grad_norm": (0, True, None, False, False, "0 turns gradient clipping off"),
    "weight_decay": (0, True, None, False, False, "0.0 for none"),
    "beta": (0, True, None, False, False, "0.0 turns the KL penalty off"),
    "num_iterations": (1, True, None, False, True, "passes over each batch"),
    "num_batches_ahead": (0, True, None, False, True, "0 means synchronous generation"),
    "temperature": (0, False, None, False, False, "GRPO needs sampled, differing completions"),
    "top_p": (0, False, 1, True, False, "1.0 disables nucleus sampling"),
    "top_k": (1, True, None, False, True, "or None to sample from all tokens"),
    "min_p": (0, True, 1, True, False, "or None to disable min-p sampling"),
    "repetition_penalty": (0, False, None, False, False, "1.0 means no penalty"),
    "vllm_server_port": (1, True, 65535, True, True, "a TCP port"),
    "vllm_server_timeout": (0, False, None, False, False, "seconds"),
    "generation_timeout": (0, False, None, False, False, "seconds"),
    "max_concurrent": (1, True, None, False, True, "rollouts in flight at once"),
    "eval_steps": (1, True, None, False, True, "or None"),
    "save_steps": (1, True, None, False, True, "steps between checkpoints"),
    "logging_steps": (1, True, None, False, True, "steps between log lines"),
    "log_samples_every": (0, True, None, False, True, "0: never"),
    "num_samples_to_print": (1, True, None, False, True, "rows of each sample block"),
}
_NONE_ALLOWED = {"top_k", "min_p", "eval_steps"}


def _check_ranges(config: RLConfig) -> None:
    """Refuse an out-of-range numeric field with one line naming it (see ``_RANGES``)."""
    for name, (low, low_ok, high, high_ok, integer, hint) in _RANGES.items():
        value = getattr(config, name)
        if value is None and name in _NONE_ALLOWED:
            continue
        is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not is_number or (integer and not isinstance(value, int)):
            raise ConfigError(
                f"{name}={value!r} must be {'an integer' if integer else 'a number'}", hint=hint
            )
        too_low = low is not None and (value < low if low_ok else value <= low)
        too_high = high is not None and (value > high if high_ok else value >= high)
        if too_low or too_high:
            lo = "" if low is None else f"{'[' if low_ok else '('}{low}"
            hi = "" if high is None else f"{high}{']' if high_ok else ')'}"
            where = (
                f"in {lo}, {hi}"
                if low is not None and high is not None
                else f"{'>=' if low_ok else '>'} {low}"
            )
            raise ConfigError(f"{name}={value!r} must be {where}", hint=hint)


def _targets(report_to: str | list[str] | None) -> list[str]:
    return [report_to] if isinstance(report_to, str) else list(report_to or [])


def __getattr__(name: str) -> Any:
    # RLTrainer (and its helpers) live in rl_trainer.py, which imports the trainer stack: loaded
    # on first use, so RLConfig (and vf-rl's validation) does not pay for it.
    if name in ("RLTrainer", "_load_model", "_describe_model"):
        from verifiers.training.rl import trainer as rl_trainer

        return getattr(rl_trainer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
