"""The one table of presets: each ``GRPOConfig`` field whose default depends on the entry point.

Four entry points build a ``GRPOConfig``:

* ``GRPOConfig(...)``: the plain field defaults (declared once, in ``fields.py``; not repeated here);
* ``grpo_defaults(run_name)``: the ``"default"`` column, the values 0.1.x scripts were written against;
* ``grpo_defaults(run_name, preset="small")``: the ``"small"`` column, LoRA on a small model on one
  machine, as the shipped examples train;
* ``RLConfig()`` / ``vf-rl`` (``RLConfig.to_grpo_config``, and a TOML's ``[trainer.args]``, which
  are ``RLConfig`` fields): the ``"rl"`` column, the ``"small"`` values with a LoRA adapter trained.

Each :class:`Row` gives a field's value under each preset (:data:`FIELD`: the field's own
default) and, once, the reason the presets differ. Every entry point reads :data:`PRESET_TABLE`
through :func:`preset_values` / :func:`preset_value` (``fields.preset_default`` adds the field
defaults); tests/training/config/test_presets.py checks that
each one's values equal the table's, and that docs/training.md's table is :func:`markdown_table`.

Reporting: a preset's ``"wandb"`` falls back to TensorBoard (or nothing) when wandb is not
installed, with one warning; a ``report_to`` that includes ``"wandb"`` given explicitly (to
``grpo_defaults`` or ``RLConfig``) is refused in one line instead (``rules.check_report_to``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from verifiers.errors import ConfigError

PRESETS = ("default", "small", "rl")  # the columns; grpo_defaults takes the first two


class _Sentinel:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


FIELD = _Sentinel("FIELD")  # the field's own default (fields.py, or TrainingArguments')
AUTO = _Sentinel("AUTO")  # bf16: on where the hardware computes it fast (presets.bf16_auto)


@dataclass(frozen=True)
class Row:
    """One field's value under each preset, and why they differ (or why the presets set it)."""

    field: str
    default: Any
    small: Any
    rl: Any
    why: str

    def value(self, preset: str) -> Any:
        return getattr(self, preset)


# fmt: off
PRESET_TABLE: tuple[Row, ...] = (
    Row("max_steps", 500, 500, 500,
        "the presets train a fixed number of steps (TrainingArguments: -1, counted from num_train_epochs)"),
    Row("learning_rate", FIELD, FIELD, 1e-5,
        "RLConfig trains a LoRA adapter, which needs a larger step than the full model's 1e-6"),
    Row("lr_scheduler_type", "constant_with_warmup", "constant_with_warmup", "constant_with_warmup",
        "a constant learning rate after warm-up (TrainingArguments: linear decay to 0 at max_steps)"),
    Row("warmup_steps", 10, 0, 0,
        "the 0.1.x value; without warm-up on small LoRA runs, where constant_with_warmup with warm-up "
        "would train step 1 at a learning rate of 0"),
    Row("max_grad_norm", 0.01, FIELD, FIELD,
        "the 0.1.x full-model value; small LoRA runs keep TrainingArguments' 1.0"),
    Row("beta", FIELD, 0.0, 0.0,
        "no KL penalty on small runs: saves the reference model's forward pass and its memory"),
    Row("loss_type", FIELD, FIELD, "cispo",
        "RLConfig: importance-sampled policy gradient against the server's log-probs, tokens outside a "
        "ratio band masked, steady one step off-policy (num_batches_ahead=1)"),
    Row("max_seq_len", 4096, FIELD, FIELD,
        "the 0.1.x value; small models and the shipped examples fit in 2048"),
    Row("max_tokens", FIELD, FIELD, 512,
        "RLConfig: a per-turn limit, as the guides say (None when max_seq_len <= 512: the sequence "
        "bounds the turn)"),
    Row("gradient_accumulation_steps", 4, 4, 8,
        "samples a step: 8 × 4 = 32 for grpo_defaults (4 prompts × 8 completions); RLConfig counts "
        "batch_size = 64 rollouts = micro_batch_size 8 × 8 (field default: 8 × 1)"),
    Row("gradient_checkpointing", True, FIELD, FIELD,
        "the 0.1.x full-model value (memory); small models train faster without it"),
    Row("bf16", AUTO, AUTO, AUTO,
        "bf16 on a bf16-capable GPU, and on a CPU-only machine whose bf16 matmul is at least 1.5x its fp32 "
        "(measured at start; fp32 master weights, fp32 log-softmax); else fp32 (one line says which)"),
    Row("save_strategy", "steps", "steps", "steps", "checkpoints every save_steps"),
    Row("save_steps", 500, 50, 50,
        "small runs are short: a checkpoint every 50 steps (the last step is saved too)"),
    Row("save_only_model", True, True, FIELD,
        "grpo_defaults: checkpoints hold the model only (pass False to resume exactly); vf-rl resumes "
        "runs (resume_from_checkpoint), so it keeps the optimizer state"),
    Row("logging_steps", 1, 1, 1, "a log line every step (TrainingArguments: 500)"),
    Row("log_on_each_node", False, False, FIELD, "grpo_defaults: log from the main node only"),
    Row("log_completions", True, True, True,
        "show sample completions (RLConfig: every log_samples_every steps)"),
    Row("num_completions_to_print", FIELD, FIELD, 2, "RLConfig prints short blocks of 2 samples"),
    Row("disable_tqdm", FIELD, FIELD, True, "RLTrainer prints one line per step instead of a progress bar"),
    Row("report_to", "wandb", "none", "none",
        "the 0.1.x scripts report to W&B (falls back to TensorBoard, else nothing, when wandb is not "
        "installed); small runs report nowhere unless asked"),
)
# fmt: on
_BY_FIELD = {row.field: row for row in PRESET_TABLE}


def _check_preset(preset: str) -> None:
    if preset not in PRESETS:
        raise ConfigError(f"unknown preset {preset!r}", hint=f"use one of {sorted(PRESETS)}")


def preset_value(preset: str, name: str) -> Any:
    """The table's value of ``name`` under ``preset``: :data:`FIELD` / :data:`AUTO` as such,
    :data:`FIELD` for a field with no row."""
    _check_preset(preset)
    row = _BY_FIELD.get(name)
    return FIELD if row is None else row.value(preset)


def preset_values(preset: str) -> dict[str, Any]:
    """``{field: value}`` that ``preset`` sets (rows whose cell is not :data:`FIELD`; AUTO kept)."""
    _check_preset(preset)
    return {row.field: row.value(preset) for row in PRESET_TABLE if row.value(preset) is not FIELD}


@dataclass(frozen=True)
class Bf16Choice:
    """What AUTO means for ``bf16`` on this machine, and the one line that says so."""

    bf16: bool
    use_cpu: bool  # CPU bf16 autocast: accelerate's CPU mode (transformers refuses bf16 without it)
    line: str
    warn: bool  # a warning (fp32 on a GPU without bf16) rather than an info line


def bf16_auto(cuda: bool, gpu_bf16: bool, deepspeed: bool, cpu: Any = None) -> Bf16Choice:
    """AUTO for ``bf16``: on a bf16-capable GPU; on a machine without CUDA, what ``cpu`` (a
    ``utils.compute_dtype.ComputeDtype``, measured when None) chose; else fp32.

    DeepSpeed on CPU keeps fp32: its CPU path with bf16 is not one this project tests.
    """
    if cuda:
        if gpu_bf16:
            return Bf16Choice(True, False, "bf16 on a bf16-capable GPU", False)
        return Bf16Choice(False, False, "this GPU has no bf16: training in fp32 (bf16=False)", True)
    if deepspeed:
        return Bf16Choice(False, False, "DeepSpeed on CPU: training in fp32 (bf16=False)", False)
    if cpu is None:
        from verifiers.utils.compute_dtype import cpu_compute_dtype

        cpu = cpu_compute_dtype()
    if cpu.bf16:
        return Bf16Choice(
            True, True, f"training in bf16 autocast with fp32 master weights: {cpu.line()}", False
        )
    return Bf16Choice(False, False, f"training in fp32 (bf16=False): {cpu.line()}", False)


def _cell(value: Any) -> str:
    if value is FIELD:
        return "·"
    if value is AUTO:
        return "auto"
    if isinstance(value, str):
        return f"`{value}`"
    return f"`{value!r}`"


def markdown_table() -> str:
    """The table as Markdown (docs/training.md shows it; a test keeps the two equal)."""
    lines = [
        '| field | `grpo_defaults()` | `preset="small"` | `RLConfig` / `vf-rl` | why |',
        "|---|---|---|---|---|",
    ]
    for row in PRESET_TABLE:
        cells = " | ".join(_cell(row.value(p)) for p in PRESETS)
        lines.append(f"| `{row.field}` | {cells} | {row.why} |")
    return "\n".join(lines)
