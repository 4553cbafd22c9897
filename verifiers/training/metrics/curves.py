"""``curves.png``: the run's main metrics against the optimizer step, one titled panel each.

Panels: reward (mean, its spread as a band, eval reward), loss, entropy, importance
ratio (mean, min/max band), completion length (mean, min/max band) and where each
step's time went (waiting for generation / training / weight sync, stacked). A metric
the run did not log leaves its panel empty with a note, so the figure's layout is the
same for every run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

CURVES_FILE = "curves.png"

TIME_SPLIT = (  # (log key, legend label, colour): stacked bottom to top in the order a step runs
    ("time/wait_generation_s", "waiting for generation", "tab:orange"),
    ("time/train_s", "training", "tab:blue"),
    ("time/sync_s", "weight sync", "tab:green"),
)


def _series(rows: Sequence[Mapping[str, Any]], *keys: str) -> list[tuple[float, ...]]:
    """(step, value of each key) for the rows that logged the first key; a missing other key is None."""
    return [
        (row["step"], *(row.get(key) for key in keys))
        for row in rows
        if isinstance(row.get(keys[0]), (int, float))
    ]


def reward_band(rows: Sequence[Mapping[str, Any]]) -> tuple[list[float], list[float]]:
    """Lower and upper edge of the reward band: mean ± std, kept within the rewards observed.

    A step's own range (``reward/min``, ``reward/max``) bounds it when logged, else the
    range of every reward value the run logged: a 0/1 reward's band never leaves [0, 1].
    """
    points = _series(rows, "reward", "reward_std", "reward/min", "reward/max")
    seen = [v for _, mean, _, lo, hi in points for v in (mean, lo, hi) if v is not None]
    floor, ceiling = (min(seen), max(seen)) if seen else (0.0, 0.0)
    lower, upper = [], []
    for _, mean, std, lo, hi in points:
        spread = std or 0.0
        lower.append(max(mean - spread, floor if lo is None else lo))
        upper.append(min(mean + spread, ceiling if hi is None else hi))
    return lower, upper


def plot_curves(log_history: Sequence[Mapping[str, Any]], path: str | Path) -> Path | None:
    """Write the panels for ``log_history`` (Trainer's, one dict per log) to ``path``; None if no
    step logged a reward or a loss."""
    rows = [h for h in log_history if "step" in h and ("reward" in h or "loss" in h)]
    if not rows:
        return None
    import matplotlib

    matplotlib.use("Agg")  # no display on training machines
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(15, 7.5))
    ax_reward, ax_loss, ax_entropy, ax_ratio, ax_length, ax_time = axes.flat
    _reward_panel(ax_reward, rows, log_history)
    _line_panel(ax_loss, rows, "loss", "loss", "loss", "tab:red")
    _line_panel(ax_entropy, rows, "entropy", "entropy", "nats per token", "tab:purple")
    _band_panel(ax_ratio, rows, "importance_ratio", "importance ratio (trainer / server)", "ratio")
    if _series(rows, "importance_ratio/mean"):
        ax_ratio.axhline(1.0, color="grey", linewidth=0.8, linestyle=":")
    _band_panel(ax_length, rows, "completion_length", "completion length", "tokens")
    _time_panel(ax_time, rows)
    fig.suptitle(f"training curves (last step {rows[-1]['step']})")
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def _finish(ax, title: str, ylabel: str, drawn: bool) -> None:
    from matplotlib.ticker import MaxNLocator

    ax.set(title=title, xlabel="step", ylabel=ylabel)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are whole numbers
    ax.ticklabel_format(axis="y", useOffset=False)  # 10.7900 on the axis, not "+1.079e1" above it
    if not drawn:
        ax.text(0.5, 0.5, "not logged", ha="center", va="center", transform=ax.transAxes, color="grey")
    elif ax.get_legend_handles_labels()[0]:
        ax.legend(loc="best", fontsize="small")


def _reward_panel(ax, rows, log_history) -> None:
    points = _series(rows, "reward")
    if points:
        steps = [p[0] for p in points]
        ax.plot(steps, [p[1] for p in points], marker=".", label="reward (mean)")
        lower, upper = reward_band(rows)
        ax.fill_between(steps, lower, upper, alpha=0.2, label="± std, within observed range")
    evals = [(h["step"], h["eval_reward"]) for h in log_history if "eval_reward" in h and "step" in h]
    if evals:
        ax.plot(*zip(*evals, strict=True), marker="o", linestyle="--", label="eval reward")
    _finish(ax, "reward", "reward", bool(points or evals))


def _line_panel(ax, rows, key: str, title: str, ylabel: str, color: str) -> None:
    points = _series(rows, key)
    if points:
        ax.plot(*zip(*points, strict=True), marker=".", color=color)
    _finish(ax, title, ylabel, bool(points))


def _band_panel(ax, rows, family: str, title: str, ylabel: str) -> None:
    """``<family>/mean`` as a line, with the ``/min`` to ``/max`` band where those were logged."""
    points = _series(rows, f"{family}/mean", f"{family}/min", f"{family}/max")
    if points:
        ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", label="mean")
        banded = [p for p in points if p[2] is not None and p[3] is not None]
        if banded:
            ax.fill_between(
                [p[0] for p in banded],
                [p[2] for p in banded],
                [p[3] for p in banded],
                alpha=0.2,
                label="min to max",
            )
    _finish(ax, title, ylabel, bool(points))


def _time_panel(ax, rows) -> None:
    timed = [r for r in rows if any(isinstance(r.get(key), (int, float)) for key, _, _ in TIME_SPLIT)]
    if timed:
        steps = [r["step"] for r in timed]
        layers = [[float(r.get(key) or 0.0) for r in timed] for key, _, _ in TIME_SPLIT]
        labels = [label for _, label, _ in TIME_SPLIT]
        colors = [color for _, _, color in TIME_SPLIT]
        ax.stackplot(steps, *layers, labels=labels, colors=colors, alpha=0.8)
    _finish(ax, "step time", "seconds per step", bool(timed))
