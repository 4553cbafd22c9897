"""What an ``RLTrainer`` run shows: the one-line step summary, the metrics file, the sample schedule."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

METRICS_FILE = "metrics.jsonl"

STEP_FIELDS = (  # (log key, label, format)
    ("reward", "reward", ".3f"),
    ("entropy", "entropy", ".3f"),
    ("importance_ratio/mean", "importance_ratio", ".3f"),
    ("loss", "loss", ".4g"),
    ("learning_rate", "lr", ".2e"),
)


def format_step_line(step: int, max_steps: int, logs: dict[str, Any]) -> str:
    """``Step 12/100: reward=0.520 entropy=2.310 importance_ratio=1.010 loss=0.0123 lr=1.00e-05``."""
    parts = [
        f"{label}={logs[key]:{fmt}}"
        for key, label, fmt in STEP_FIELDS
        if isinstance(logs.get(key), (int, float)) and not isinstance(logs.get(key), bool)
    ]
    return f"Step {step}/{max_steps}: " + " ".join(parts)


def is_main_process() -> bool:
    """Rank 0 (or a single process); usable before the Trainer's accelerator exists."""
    return os.environ.get("RANK", "0") == "0"


def say(message: str) -> None:
    """A start-up or progress line, printed by the main process only."""
    if is_main_process():
        print(message, flush=True)


class StepLogger(TrainerCallback):
    """Prints the per-step line (and eval lines), and appends every log to ``<output_dir>/runs/metrics.jsonl``."""

    def __init__(self, output_dir: str):
        self.path = Path(output_dir) / "runs" / METRICS_FILE
        self.started = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps({"step": state.global_step, **logs}, default=float) + "\n")
        if any(k.startswith("eval_") for k in logs):
            shown = {k[len("eval_") :]: v for k, v in logs.items() if k.startswith("eval_")}
            print(
                f"Eval at step {state.global_step}: reward={shown.get('reward', float('nan')):.3f}",
                flush=True,
            )
        elif "train_runtime" in logs:
            minutes = logs["train_runtime"] / 60
            print(
                f"Done: {state.global_step} steps in {minutes:.1f} min; outputs in {args.output_dir}",
                flush=True,
            )
        elif "loss" in logs or "reward" in logs:
            print(format_step_line(state.global_step, state.max_steps, logs), flush=True)


class SampleSchedule(TrainerCallback):
    """Turns ``log_completions`` on for the batch of every ``every``-th step only.

    The trainer prints a sample block for a batch when ``args.log_completions`` is
    set as the batch is prepared, which happens inside the step, after ``on_step_begin``.
    """

    def __init__(self, every: int):
        self.every = every

    def on_step_begin(self, args, state, control, **kwargs):
        args.log_completions = self.every > 0 and state.global_step % self.every == 0
