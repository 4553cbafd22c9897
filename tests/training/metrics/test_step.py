"""The step's metrics (verifiers/training/metrics/step.py): the accumulator's means and extremes,
and the curves under the name the step module exports. Tier 1 (pure functions)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


def test_metrics_accumulator_means_and_extremes():
    from verifiers.training.metrics.step import MetricsAccumulator

    acc = MetricsAccumulator()
    acc.add({"loss": 1.0, "ratio/min": 0.9, "ratio/max": 1.1})
    acc.add({"loss": torch.tensor(3.0), "ratio/min": 0.8, "ratio/max": 1.05, "skip": float("nan")})
    assert acc.pop() == {"loss": 2.0, "ratio/min": 0.8, "ratio/max": 1.1}
    assert acc.pop() == {}


def test_plot_curves_writes_a_png(tmp_path):
    from verifiers.training.metrics.step import plot_curves

    history = [{"step": i, "loss": 1.0 / i, "reward": 0.1 * i, "reward_std": 0.05} for i in range(1, 6)]
    history.append({"step": 5, "eval_reward": 0.4})
    path = plot_curves(history, tmp_path / "curves.png")
    assert path.read_bytes()[:4] == b"\x89PNG"
    assert plot_curves([], tmp_path / "none.png") is None
