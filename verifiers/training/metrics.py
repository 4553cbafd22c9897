"""Training metrics: per-step aggregation, rollout statistics, sample tables and curve plots.

Names users read in logs and W&B: ``reward``, ``reward_std``, ``rewards/<func>``,
``kl``, ``clip_ratio/*``, ``importance_ratio/{mean,min,max}``, ``entropy``,
``completion_length/{mean,min,max}``, ``truncated_frac``, ``zero_std_groups_frac``,
``filtered_groups_frac``, ``template_rewrites``, ``rollout_errors``, and times
``time/generation_s``, ``time/sync_s``, ``time/train_s``.
"""

from __future__ import annotations

import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from verifiers.types import GenerateOutputs, ProcessedOutputs

logger = logging.getLogger("verifiers.training.metrics")

CURVES_FILE = "curves.png"


class MetricsAccumulator:
    """Sums of named values since the last ``pop``; ``pop`` returns their means.

    ``min``/``max`` metrics (names ending in ``/min`` or ``/max``) keep the extreme
    instead of the mean, so ``importance_ratio/max`` is the step's max.
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
        out = {name: self._sum[name] / self._count[name] for name in self._sum}
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
    for name, values in outputs.metrics.items():
        if values:
            out[f"rewards/{name}"] = sum(values) / len(values)
    states = outputs.state
    out["rollout_errors"] = float(sum(1 for s in states if s.get("error")))
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


def log_samples(
    outputs: GenerateOutputs,
    rewards: Sequence[float],
    advantages: Sequence[float],
    step: int,
    num: int | None,
    to_wandb: bool = False,
) -> None:
    """The sample table on the console, and as a W&B table when ``to_wandb``."""
    print_samples(outputs, rewards, advantages, step, num)
    if to_wandb:
        log_wandb_samples(outputs, rewards, advantages, step, num)


def print_samples(
    outputs: GenerateOutputs,
    rewards: Sequence[float],
    advantages: Sequence[float],
    step: int,
    num: int | None,
) -> None:
    """A rich table of the batch's first ``num`` rollouts (all if None) with reward and advantage."""
    from verifiers.utils.display import print_prompt_completions_sample

    count = len(outputs) if num is None else min(num, len(outputs))
    columns = {"reward": list(rewards[:count]), "advantage": list(advantages[:count])}
    for name, values in outputs.metrics.items():
        columns[name] = list(values[:count])
    print_prompt_completions_sample(outputs.prompt[:count], outputs.completion[:count], columns, step, count)


def log_wandb_samples(
    outputs: GenerateOutputs,
    rewards: Sequence[float],
    advantages: Sequence[float],
    step: int,
    num: int | None,
) -> None:
    """The same samples as a W&B table, if wandb is installed and a run is active."""
    try:
        import wandb
    except ImportError:
        return
    if wandb.run is None:
        return
    from verifiers.utils.display import format_messages

    count = len(outputs) if num is None else min(num, len(outputs))
    table = wandb.Table(columns=["step", "prompt", "completion", "reward", "advantage"])
    for i in range(count):
        table.add_data(
            step,
            format_messages(outputs.prompt[i]),
            format_messages(outputs.completion[i]),
            float(rewards[i]),
            float(advantages[i]),
        )
    wandb.log({"completions": table}, commit=False)


def plot_curves(log_history: Sequence[Mapping[str, Any]], path: str | Path) -> Path | None:
    """PNG of reward (with its std band) and loss against the optimizer step; None if nothing to plot."""
    rows = [h for h in log_history if "step" in h and ("reward" in h or "loss" in h)]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display on training machines
    import matplotlib.pyplot as plt

    fig, (ax_r, ax_l) = plt.subplots(1, 2, figsize=(10, 3.6))
    reward = [(h["step"], h["reward"], h.get("reward_std", 0.0)) for h in rows if "reward" in h]
    if reward:
        steps, means, stds = zip(*reward, strict=True)
        ax_r.plot(steps, means, marker=".", label="reward")
        ax_r.fill_between(
            steps,
            [m - s for m, s in zip(means, stds, strict=True)],
            [m + s for m, s in zip(means, stds, strict=True)],
            alpha=0.2,
        )
    evals = [(h["step"], h["eval_reward"]) for h in log_history if "eval_reward" in h and "step" in h]
    if evals:
        ax_r.plot(*zip(*evals, strict=True), marker="o", linestyle="--", label="eval reward")
    ax_r.set(title="reward", xlabel="step")
    ax_r.legend(loc="best")
    loss = [(h["step"], h["loss"]) for h in rows if "loss" in h]
    if loss:
        ax_l.plot(*zip(*loss, strict=True), marker=".", color="tab:red")
    ax_l.set(title="loss", xlabel="step")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
