"""The step's metrics (verifiers/training/metrics/step.py): the accumulator's means and extremes, the
curves under the name the step module exports, and rollout failures counted by their kind, not their
message. Tier 1 (pure functions)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tests.doubles.rollouts import outputs_of  # noqa: E402
from verifiers.envs.state import new_state  # noqa: E402
from verifiers.failures import ROLLOUT_ENDING, RolloutFailure  # noqa: E402
from verifiers.training.metrics.step import rollout_metrics  # noqa: E402

pytestmark = pytest.mark.usefixtures("fresh_warnings")  # tests/conftest.py


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


def test_counts_read_the_kind_not_the_message():
    states = []
    for kind in sorted(ROLLOUT_ENDING, key=lambda k: k.value):
        state = new_state([], "", "default", {})
        # The message names another kind: only ``kind`` may be counted.
        state["failure"] = RolloutFailure(kind, "env_response: ServerUnreachableError: misleading")
        states.append(state)
    tool_state = new_state([], "", "default", {})
    tool_state["tool_timeouts"] = 2
    states.append(tool_state)
    outputs = outputs_of(states, [0.0] * len(states))
    counts = rollout_metrics(outputs, None, outputs.reward)
    for kind in ROLLOUT_ENDING:
        assert counts[f"errors/{kind.value}"] == 1.0, kind
    assert counts["errors/tool_timeout"] == 2.0 and counts["rollout_errors"] == len(ROLLOUT_ENDING)
