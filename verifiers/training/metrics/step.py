"""Training metrics: per-step aggregation, rollout statistics and sample tables (curves: curves.py).

Every name logged here is registered, with its meaning, in ``metric_names.py``
(the docs' metric table is generated from it). Failure counters (``errors/<kind>``,
one per ``FailureKind``, and ``completions/empty``) are summed per step rather than
averaged: a failure never stops a run; it is counted here and logged once
(``warn_once``) where it happens, not once per sample.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from verifiers.envs.results import ERROR_METRIC
from verifiers.failures import REWARD_NONFINITE, REWARD_RAISED, FailureKind, failure_of
from verifiers.training.metrics.curves import CURVES_FILE, plot_curves  # noqa: F401 (0.2 names, re-exported)
from verifiers.training.metrics.names import BY_NAME
from verifiers.training.types import GeneratedBatch
from verifiers.types import GenerateOutputs, ProcessedOutputs
from verifiers.utils.logging import warn_once

logger = logging.getLogger("verifiers.training.metrics.step")

EMPTY_COMPLETIONS = "completions/empty"

SUMMED_PREFIXES = ("errors/", "completions/")
"""Metrics whose values within a step add up (counts) instead of being averaged."""

# Counters every training batch reports, 0 when nothing happened: a flat line in the
# logs says "no failures" rather than "not measured".
BATCH_COUNTERS = (*(f"errors/{kind.value}" for kind in FailureKind if kind.per_rollout), EMPTY_COMPLETIONS)

FAILURE_METRICS = {name: BY_NAME[name].description for name in BATCH_COUNTERS} | {
    f"errors/{kind.value}": kind.description for kind in FailureKind if not kind.per_rollout
}
"""Failure counters: name -> what one count means."""


class MetricsAccumulator:
    """Sums of named values since the last ``pop``; ``pop`` returns their means.

    ``min``/``max`` metrics (names ending in ``/min`` or ``/max``) keep the extreme
    instead of the mean, so ``importance_ratio/max`` is the step's max; counters
    (names starting with one of ``SUMMED_PREFIXES``) keep the sum.
    """

    def __init__(self) -> None:
        self._sum: dict[str, float] = defaultdict(float)
        self._count: dict[str, int] = defaultdict(int)
        self._extreme: dict[str, float] = {}

    def add(self, values: Mapping[str, Any]) -> None:
        for name, value in values.items():
            v = float(value.item() if hasattr(value, "item") else value)
            if math.isnan(v):
                continue
            if name.endswith("/min") or name.endswith("/max"):
                pick = min if name.endswith("/min") else max
                self._extreme[name] = pick(self._extreme.get(name, v), v)
            else:
                self._sum[name] += v
                self._count[name] += 1

    def pop(self) -> dict[str, float]:
        out = {
            name: self._sum[name] if name.startswith(SUMMED_PREFIXES) else self._sum[name] / self._count[name]
            for name in self._sum
        }
        out.update(self._extreme)
        self.__init__()
        return out


def rollout_rewards(processed: ProcessedOutputs, num_rollouts: int, fallback: Sequence[float]) -> list[float]:
    """One reward per rollout from processed samples (they carry e.g. zeroed truncated rewards)."""
    if not processed.rewards:
        return [float(r) for r in fallback]
    index = processed.rollout_index or list(range(len(processed)))
    rewards = [float(r) for r in fallback]
    for sample, k in reversed(list(enumerate(index))):  # reversed: the first sample of a rollout wins
        rewards[k] = float(processed.rewards[sample])
    return rewards[:num_rollouts]


def rollout_metrics(
    outputs: GenerateOutputs, processed: ProcessedOutputs | None, rewards: Sequence[float]
) -> dict[str, float]:
    """Statistics of one generation batch: rewards, each reward function, lengths, truncation, errors."""
    n = max(len(rewards), 1)
    mean = sum(rewards) / n
    out: dict[str, float] = {
        "reward": mean,
        "reward_std": math.sqrt(sum((r - mean) ** 2 for r in rewards) / max(n - 1, 1)),
    }
    if rewards:  # the band of curves.png stays within them
        out["reward/min"], out["reward/max"] = float(min(rewards)), float(max(rewards))
    for name, values in outputs.metrics.items():
        if values and name != ERROR_METRIC:  # not a reward function: counted as rollout_errors below
            out[f"rewards/{name}"] = sum(values) / len(values)
    states = outputs.state
    out.update(failure_counts(outputs))
    if processed is not None and len(processed):
        lengths = [sum(1 for _ in ids) for ids in processed.completion_ids]
        out["completion_length/mean"] = sum(lengths) / len(lengths)
        out["completion_length/min"] = float(min(lengths))
        out["completion_length/max"] = float(max(lengths))
        truncated = processed.is_truncated or [bool(s.get("is_truncated")) for s in states]
        out["truncated_frac"] = sum(map(bool, truncated)) / max(len(truncated), 1)
        out["template_rewrites"] = float(processed.metrics.get("template_rewrites", 0.0))
        out["samples_per_rollout"] = len(processed) / n
    return out


def _is_empty(completion: Any) -> bool:
    """No text and no tool call from the model (an assistant turn that stopped at once)."""
    if isinstance(completion, str):
        return completion == ""
    turns = [m for m in completion or [] if isinstance(m, Mapping) and m.get("role") == "assistant"]
    return all(not m.get("content") and not m.get("tool_calls") for m in turns)


def failure_counts(outputs: GenerateOutputs) -> dict[str, float]:
    """``rollout_errors`` and the per-batch counters of ``BATCH_COUNTERS``, read from the rollouts'
    typed failures (``state["failure"]``), reward errors and tool timeouts."""
    counts = dict.fromkeys(BATCH_COUNTERS, 0.0)
    failed = 0
    for state, completion in zip(outputs.state, outputs.completion, strict=True):
        failure = failure_of(state)
        if failure is not None:
            failed += 1
            counts[f"errors/{failure.kind.value}"] += 1
        problems = set((state.get("reward_errors") or {}).values())
        counts[f"errors/{FailureKind.REWARD_FN.value}"] += REWARD_RAISED in problems
        counts[f"errors/{FailureKind.NONFINITE_REWARD.value}"] += REWARD_NONFINITE in problems
        counts[f"errors/{FailureKind.TOOL_TIMEOUT.value}"] += int(state.get("tool_timeouts") or 0)
        counts[EMPTY_COMPLETIONS] += failure is None and _is_empty(completion)
    return {ERROR_METRIC: float(failed), **counts}


def warn_batch_problems(stats: Mapping[str, float], batch_index: int, num_rollouts: int) -> None:
    """Log once per run the batch-level problems no other part of the code reports at its source.

    (Failing reward functions, env hooks, tools, timeouts and outages are logged
    where they happen; these are properties of a whole batch.)
    """
    empty = stats.get(EMPTY_COMPLETIONS, 0.0)
    if empty:
        warn_once(
            logger,
            "batch:empty-completions",
            "%d of %d completions in generation batch %d were empty (the model ended its turn at once); "
            "they are trained like any other (logged once; counted in completions/empty)",
            empty,
            num_rollouts,
            batch_index,
        )
    if stats.get("zero_std_groups_frac", 0.0) >= 1.0:
        warn_once(
            logger,
            "batch:all-groups-equal",
            "every group in generation batch %d had equal rewards: all advantages are 0 and the batch "
            "teaches nothing (logged once; see zero_std_groups_frac). Rewards must differ within a group: "
            "raise the temperature, give partial credit, or filter such groups (filter_zero_std_groups)",
            batch_index,
        )
    truncated = stats.get("truncated_frac", 0.0)
    if truncated:
        warn_once(
            logger,
            "batch:truncated",
            "%.0f%% of the completions in generation batch %d were cut at max_tokens / max_seq_len "
            "(logged once; see truncated_frac); with mask_truncated_completions=True (the default) they are left "
            "out of the loss",
            100 * truncated,
            batch_index,
        )


@dataclass
class SampleTable:
    """The first rollouts of a batch as a table: one entry per row in each list and column."""

    step: int
    prompts: list[Any]
    completions: list[Any]
    columns: dict[str, list[float]]  # reward, advantage, then each metric of the env

    @classmethod
    def of(
        cls,
        outputs: GenerateOutputs,
        rewards: Sequence[float],
        advantages: Sequence[float],
        step: int,
        num: int | None,
    ) -> SampleTable:
        """The batch's first ``num`` rollouts (all if None) with reward and advantage."""
        count = len(outputs) if num is None else min(num, len(outputs))
        columns = {"reward": list(rewards[:count]), "advantage": list(advantages[:count])}
        for name, values in outputs.metrics.items():
            columns[name] = list(values[:count])
        return cls(step, list(outputs.prompt[:count]), list(outputs.completion[:count]), columns)


def log_samples(
    outputs: GenerateOutputs,
    rewards: Sequence[float],
    advantages: Sequence[float],
    step: int,
    num: int | None,
    to_wandb: bool = False,
    tensorboard: Any = None,
) -> None:
    """The sample table on the console, as a W&B table when ``to_wandb``, and as text to
    ``tensorboard`` (a ``SummaryWriter``, see :func:`tensorboard_writer`) when given."""
    table = SampleTable.of(outputs, rewards, advantages, step, num)
    print_samples(table)
    if to_wandb:
        log_wandb_samples(table)
    if tensorboard is not None:
        log_tensorboard_samples(table, tensorboard)


def record_batch(
    metrics: MetricsAccumulator,
    batch: GeneratedBatch,
    rewards: list[float],
    advantages_B: Any,
    zero_std_groups_frac: float,
    *,
    main_process: bool,
    samples_at: int | None = None,
    num_samples: int | None = None,
    to_wandb: bool = False,
    tensorboard: Any = None,
) -> None:
    """A generation batch's bookkeeping as it is prepared for training: its rollout metrics, its
    generation time and policy lag into ``metrics``, the warnings its numbers call for (main
    process), and its sample table (``advantages_B``: a tensor) when ``samples_at`` (the step it
    is logged at) is given."""
    outputs = batch.outputs
    stats = rollout_metrics(outputs, batch.processed, rewards)
    stats.update({"zero_std_groups_frac": zero_std_groups_frac, **batch.metrics})
    if main_process:
        warn_batch_problems(stats, batch.index, len(outputs))
    metrics.add(stats)
    metrics.add({"time/generation_s": batch.generation_s, "policy_lag": batch.index - batch.policy_version})
    if samples_at is not None:
        log_samples(outputs, rewards, advantages_B.tolist(), samples_at, num_samples, to_wandb, tensorboard)


def print_samples(table: SampleTable) -> None:
    """The samples as a rich table on the console."""
    from verifiers.utils.display import print_prompt_completions_sample

    count = len(table.prompts)
    print_prompt_completions_sample(table.prompts, table.completions, table.columns, table.step, count)


def log_wandb_samples(table: SampleTable) -> None:
    """The samples (prompt, completion, reward, advantage) as a W&B table, if wandb is installed and
    a run is active."""
    try:
        import wandb
    except ImportError:
        return
    if wandb.run is None:
        return
    from verifiers.utils.display import format_messages

    out = wandb.Table(columns=["step", "prompt", "completion", "reward", "advantage"])
    for i, (prompt, completion) in enumerate(zip(table.prompts, table.completions, strict=True)):
        reward, advantage = table.columns["reward"][i], table.columns["advantage"][i]
        out.add_data(
            table.step, format_messages(prompt), format_messages(completion), float(reward), float(advantage)
        )
    wandb.log({"completions": out}, commit=False)


def tensorboard_writer(callbacks: Sequence[Any]) -> Any:
    """The ``SummaryWriter`` of the Trainer's TensorBoard callback (``report_to="tensorboard"``),
    so the samples land in the run's event file beside its scalars; None without one."""
    for callback in callbacks:
        if type(callback).__name__ == "TensorBoardCallback":
            return getattr(callback, "tb_writer", None)  # None until on_train_begin has run
    return None


def samples_markdown(table: SampleTable) -> str:
    """The samples as a Markdown table (TensorBoard's text tab renders it): one row per rollout."""
    from verifiers.utils.display import format_messages

    def cell(value: Any) -> str:
        return format_messages(value).replace("|", "\\|").replace("\n", "<br>")

    names = list(table.columns)
    lines = ["| prompt | completion | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    for i, (prompt, completion) in enumerate(zip(table.prompts, table.completions, strict=True)):
        values = " | ".join(f"{float(table.columns[name][i]):.3f}" for name in names)
        lines.append(f"| {cell(prompt)} | {cell(completion)} | {values} |")
    return "\n".join(lines)


def log_tensorboard_samples(table: SampleTable, writer: Any) -> None:
    """The samples as text under the tag ``completions`` at the table's step."""
    writer.add_text("completions", samples_markdown(table), global_step=table.step)
