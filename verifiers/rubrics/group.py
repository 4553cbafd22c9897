"""RubricGroup: several rubrics scored as one.

Rewards add up, and metrics with the same name add up (so two rubrics that
both track ``format_reward_func`` report the sum, and ``<name>_error`` counts
failures across them). Member rubrics run one after another for each batch,
in the order given, so caches they keep in ``state`` (a judge's answer) are
seen by the later ones.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from verifiers.errors import ConfigError
from verifiers.rubrics.rubric import Rubric, finite_or_zero
from verifiers.types import RewardFunc, RolloutScore, RolloutScores


class RubricGroup(Rubric):
    """Scores with every rubric in ``rubrics`` and sums the results.

    Functions added to the group itself (``add_reward_func``) are scored as
    one more member, after the given rubrics.
    """

    def __init__(self, rubrics: Sequence[Rubric], **kwargs: Any):
        rubrics = list(rubrics)
        if not rubrics:
            raise ConfigError("RubricGroup needs at least one rubric", "pass a list of Rubric objects")
        for rubric in rubrics:
            if not isinstance(rubric, Rubric):
                raise ConfigError(f"RubricGroup member {rubric!r} is not a Rubric", "pass Rubric objects")
        kwargs.setdefault("parser", rubrics[0].parser)
        super().__init__(**kwargs)
        self.rubrics = rubrics

    def get_reward_func_names(self) -> list[str]:
        names = [name for rubric in self.rubrics for name in rubric.get_reward_func_names()]
        return names + super().get_reward_func_names()

    def get_reward_funcs(self) -> list[RewardFunc]:
        funcs = [func for rubric in self.rubrics for func in rubric.get_reward_funcs()]
        return funcs + super().get_reward_funcs()

    def get_reward_weights(self) -> list[float]:
        weights = [weight for rubric in self.rubrics for weight in rubric.get_reward_weights()]
        return weights + super().get_reward_weights()

    async def score_rollout(self, *args: Any, **kwargs: Any) -> RolloutScore:
        """Score one rollout with every member (arguments as ``Rubric.score_rollout``) and sum."""
        parts = [await rubric.score_rollout(*args, **kwargs) for rubric in self.rubrics]
        if self._specs:
            parts.append(await super().score_rollout(*args, **kwargs))
        metrics: dict[str, float] = {}
        for part in parts:
            for name, value in part.metrics.items():
                metrics[name] = metrics.get(name, 0.0) + value
        reward = finite_or_zero(sum(part.reward for part in parts))
        return RolloutScore(reward=reward, metrics={k: finite_or_zero(v) for k, v in metrics.items()})

    async def score_rollouts(self, *args: Any, **kwargs: Any) -> RolloutScores:
        """Score many rollouts with every member (arguments as ``Rubric.score_rollouts``) and sum."""
        parts = [await rubric.score_rollouts(*args, **kwargs) for rubric in self.rubrics]
        if self._specs:
            parts.append(await super().score_rollouts(*args, **kwargs))
        n = len(parts[0].reward)
        reward = [0.0] * n
        metrics: dict[str, list[float]] = {}
        for part in parts:
            reward = [a + b for a, b in zip(reward, part.reward, strict=True)]
            for name, values in part.metrics.items():
                total = metrics.get(name, [0.0] * n)
                metrics[name] = [a + b for a, b in zip(total, values, strict=True)]
        return RolloutScores(
            reward=[finite_or_zero(r) for r in reward],
            metrics={k: [finite_or_zero(v) for v in vs] for k, vs in metrics.items()},
        )
