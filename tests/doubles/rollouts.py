"""Finished chat rollouts built by hand: what an environment's ``a_generate`` returns, without one.

Stands in for a generation batch's ``GenerateOutputs`` (each completion a non-empty assistant
turn; states, rewards and metrics as given), for the code that reads them: rollout failure
counts and the step's metrics. Used by the default tier's unit tests of the step's metrics
(tests/training/metrics/).
"""

from __future__ import annotations

from verifiers.types import GenerateOutputs


def outputs_of(states: list[dict], rewards: list[float], metrics: dict | None = None) -> GenerateOutputs:
    """Chat rollouts with the given states and rewards (each completion a non-empty assistant turn)."""
    n = len(states)
    return GenerateOutputs(
        prompt=[[]] * n,
        completion=[[{"role": "assistant", "content": "x"}]] * n,
        answer=[""] * n,
        state=states,
        info=[{}] * n,
        task=["default"] * n,
        reward=list(rewards),
        metrics=dict(metrics or {}),
    )
