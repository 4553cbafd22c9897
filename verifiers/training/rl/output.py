"""What an ``RLTrainer`` run shows: the one-line step summary (metrics, elapsed time, ETA, where
the step's time went), the metrics file, the sample schedule."""

from __future__ import annotations

import json
import logging
import os
import time
from collections import deque
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


STEP_SPLIT = (  # where a step's time went: (log key, label), in the order they happen
    ("time/wait_generation_s", "gen-wait"),
    ("time/train_s", "train"),
    ("time/sync_s", "sync"),
)
STEP_TIME = "time/step_s"
ETA_WINDOW = 10
"""Steps whose mean duration gives the ETA: recent enough to follow a run whose steps get
slower (longer completions), long enough to smooth one slow step, and the first step's
warm-up (server connection, a first batch generated with nothing to overlap) drops out."""


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def format_duration(seconds: float, coarse: bool = False) -> str:
    """``45s``, ``3m12s``, ``1h04m``; ``coarse`` drops the seconds past a minute (``14m``), for an ETA."""
    s = max(int(round(seconds)), 0)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{round(s / 60)}m" if coarse else f"{s // 60}m{s % 60:02d}s"
    return f"{s // 3600}h{s % 3600 // 60:02d}m"


def format_timing(logs: dict[str, Any], elapsed_s: float | None, eta_s: float | None) -> str:
    """``3m12s elapsed, ETA 14m | gen-wait 4.1s train 9.8s sync 0.6s``; parts not known are left out."""
    clock = []
    if elapsed_s is not None:
        clock.append(f"{format_duration(elapsed_s)} elapsed")
    if eta_s is not None:
        clock.append(f"ETA {format_duration(eta_s, coarse=True)}")
    split = " ".join(f"{label} {logs[key]:.1f}s" for key, label in STEP_SPLIT if _number(logs.get(key)))
    return " | ".join(part for part in (", ".join(clock), split) if part)


def format_step_line(
    step: int,
    max_steps: int,
    logs: dict[str, Any],
    elapsed_s: float | None = None,
    eta_s: float | None = None,
) -> str:
    """``Step 12/100: reward=0.520 entropy=2.310 importance_ratio=1.010 loss=0.0123 lr=1.00e-05``,
    then, when the trainer timed the step, `` | 3m12s elapsed, ETA 14m | gen-wait 4.1s train 9.8s sync 0.6s``."""
    parts = [f"{label}={logs[key]:{fmt}}" for key, label, fmt in STEP_FIELDS if _number(logs.get(key))]
    line = f"Step {step}/{max_steps}: " + " ".join(parts)
    timing = format_timing(logs, elapsed_s, eta_s) if _number(logs.get(STEP_TIME)) else ""
    return f"{line} | {timing}" if timing else line


class StepClock:
    """Elapsed time since training began, and the ETA: the mean ``time/step_s`` of the last
    ``ETA_WINDOW`` steps times the steps left.

    A log covering several steps (``logging_steps`` > 1) carries their mean step time and
    counts as that many steps.
    """

    def __init__(self, window: int = ETA_WINDOW):
        self.started = time.perf_counter()
        self.recent: deque[float] = deque(maxlen=window)
        self.last_step: int | None = None

    def start(self, step: int) -> None:
        """Training begins (or resumes) at ``step``: elapsed counts from now."""
        self.started = time.perf_counter()
        self.recent.clear()
        self.last_step = step

    def tick(self, step: int, max_steps: int, step_s: float) -> tuple[float, float | None]:
        """Record the steps up to ``step`` (each ``step_s`` long); return (elapsed, ETA or None)."""
        covered = step - self.last_step if self.last_step is not None else 1
        self.recent.extend([step_s] * max(min(covered, self.recent.maxlen or 1), 1))
        self.last_step = step
        elapsed = time.perf_counter() - self.started
        if max_steps <= 0:
            return elapsed, None
        return elapsed, sum(self.recent) / len(self.recent) * max(max_steps - step, 0)


def is_main_process() -> bool:
    """Rank 0 (or a single process); usable before the Trainer's accelerator exists."""
    return os.environ.get("RANK", "0") == "0"


def say(message: str) -> None:
    """A start-up or progress line, printed by the main process only."""
    if is_main_process():
        print(message, flush=True)


# Library loggers whose INFO lines are start-up choices a vf-rl run shows (cpu_phases, lora_sync).
CHOICE_LOGGERS = ("verifiers.training.generation.cpu_phases", "verifiers.training.weights.server_link")


class _SayHandler(logging.Handler):
    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger("verifiers").handlers:  # vf.setup_logging's handler prints it (propagation)
            return
        say(record.getMessage())


def show_choices(names: tuple[str, ...] = CHOICE_LOGGERS) -> None:
    """Print these loggers' INFO lines as start-up lines (``say``) unless the user's logging set-up
    shows them already: the trainer's choices belong in the run log."""
    for name in names:
        log = logging.getLogger(name)
        if not any(isinstance(h, _SayHandler) for h in log.handlers):
            log.addHandler(_SayHandler())
        log.setLevel(logging.INFO)


def log_kind(logs: dict[str, Any]) -> str:
    """What a logged dict is: ``"eval"``, ``"summary"`` (the end of training) or ``"train"`` (a step)."""
    if any(k.startswith("eval_") for k in logs):
        return "eval"
    return "summary" if "train_runtime" in logs else "train"


def logged_steps(path: Path) -> set[tuple[str, int]]:
    """``(log_kind, step)`` of every line already in a metrics file (none when it does not exist)."""
    found: set[tuple[str, int]] = set()
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return found
    for line in lines:
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by a kill: the step is logged again, unmarked
        if isinstance(record, dict) and isinstance(record.get("step"), int):
            found.add((log_kind(record), record["step"]))
    return found


class StepLogger(TrainerCallback):
    """Prints the per-step line (and eval lines), and appends every log to ``<output_dir>/runs/metrics.jsonl``.

    A resumed run (a restart by vf-rl, or ``resume_from_checkpoint``) logs again the steps between
    its checkpoint and where the earlier run stopped: those lines get ``"redone": true``, so a
    reader keeps the last line of each step. Under vf-rl every line of a restarted trainer also
    carries ``"attempt": N`` (``$VF_RL_ATTEMPT``, 2 and on; the first attempt's lines have none).
    """

    def __init__(self, output_dir: str):
        self.path = Path(output_dir) / "runs" / METRICS_FILE
        self.clock = StepClock()
        self.earlier: set[tuple[str, int]] = set()  # (kind, step) logged before this run began

    def on_train_begin(self, args, state, control, **kwargs):
        self.clock.start(state.global_step)
        if state.is_world_process_zero:
            self.earlier = logged_steps(self.path)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        from verifiers.training.lifecycle.heartbeat import attempt

        record = {"step": state.global_step, **logs}
        if (log_kind(logs), state.global_step) in self.earlier:
            record["redone"] = True
        number = attempt()
        if number is not None and number > 1:
            record["attempt"] = number
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record, default=float) + "\n")
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
            elapsed = eta = None
            if _number(logs.get(STEP_TIME)):
                elapsed, eta = self.clock.tick(state.global_step, state.max_steps, float(logs[STEP_TIME]))
            print(format_step_line(state.global_step, state.max_steps, logs, elapsed, eta), flush=True)


class SampleSchedule(TrainerCallback):
    """Turns ``log_completions`` on for the batch of every ``every``-th step only.

    The trainer prints a sample block for a batch when ``args.log_completions`` is
    set as the batch is prepared, which happens inside the step, after ``on_step_begin``.
    """

    def __init__(self, every: int):
        self.every = every

    def on_step_begin(self, args, state, control, **kwargs):
        args.log_completions = self.every > 0 and state.global_step % self.every == 0
