"""curves.png: one titled panel per metric users watch, and the reward band within the rewards seen."""

from __future__ import annotations

import pytest

pytest.importorskip("matplotlib")

from verifiers.training.metrics import curves  # noqa: E402
from verifiers.training.metrics.curves import plot_curves, reward_band  # noqa: E402
from verifiers.training.metrics.step import CURVES_FILE  # noqa: E402


def _history(steps: int = 6) -> list[dict]:
    rows = []
    for i in range(1, steps + 1):
        rows.append(
            {
                "step": i,
                "loss": 1.0 / i,
                "reward": 0.1 * i,
                "reward_std": 0.5,
                "reward/min": 0.0,
                "reward/max": 1.0,
                "entropy": 2.0 - 0.1 * i,
                "importance_ratio/mean": 1.0,
                "importance_ratio/min": 0.8,
                "importance_ratio/max": 1.3,
                "completion_length/mean": 40.0 + i,
                "completion_length/min": 10.0,
                "completion_length/max": 64.0,
                "time/wait_generation_s": 4.0,
                "time/train_s": 9.0,
                "time/sync_s": 0.5,
            }
        )
    return rows + [{"step": steps, "eval_reward": 0.4}]


def test_reward_band_stays_within_the_observed_rewards():
    rows = _history(3)
    lower, upper = reward_band(rows)
    assert lower == [0.0, 0.0, 0.0]  # mean 0.1 - std 0.5 would be -0.4: no reward was below 0
    assert upper == pytest.approx([0.6, 0.7, 0.8])
    # Without a per-step range, the range of every reward value the run logged bounds it.
    bare = [{"step": i, "reward": r, "reward_std": 0.5} for i, r in enumerate((0.2, 0.9), 1)]
    assert reward_band(bare) == ([0.2, 0.4], pytest.approx([0.7, 0.9]))


def test_curves_have_a_titled_labelled_panel_per_metric(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)  # keep the figure to look at its panels
    path = plot_curves(_history(), tmp_path / CURVES_FILE)
    assert path.read_bytes()[:4] == b"\x89PNG"
    (fig,) = figures
    axes = {ax.get_title(): ax for ax in fig.axes}
    assert set(axes) == {
        "reward",
        "loss",
        "entropy",
        "importance ratio (trainer / server)",
        "completion length",
        "step time",
    }
    assert all(ax.get_xlabel() == "step" and ax.get_ylabel() for ax in axes.values())
    stacked = axes["step time"]
    assert [t.get_text() for t in stacked.get_legend().get_texts()] == [
        label for _, label, _ in curves.TIME_SPLIT
    ]
    top = stacked.collections[-1].get_paths()[0].vertices[:, 1].max()
    assert top == pytest.approx(13.5)  # the three parts stacked: 4 + 9 + 0.5
    assert "eval reward" in [t.get_text() for t in axes["reward"].get_legend().get_texts()]
    plt.close("all")


def test_a_metric_not_logged_leaves_a_noted_empty_panel(tmp_path, monkeypatch):
    import matplotlib.pyplot as plt

    figures = []
    monkeypatch.setattr(plt, "close", figures.append)
    assert plot_curves([{"step": 1, "loss": 0.5}], tmp_path / "c.png").is_file()
    notes = {ax.get_title(): [t.get_text() for t in ax.texts] for ax in figures[0].axes}
    assert notes["loss"] == [] and notes["entropy"] == ["not logged"] and notes["step time"] == ["not logged"]
    assert plot_curves([{"step": 1, "eval_reward": 0.5}], tmp_path / "none.png") is None
    plt.close("all")
