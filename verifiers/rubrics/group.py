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

from verifiers.compat.forms import also_takes
from verifiers.errors import ConfigError
from verifiers.rubrics.rubric import Rubric, finite_or_zero, score_state, state_form
from verifiers.types import Info, Messages, RewardFunc, RolloutScore, RolloutScores, State
from verifiers.utils.logging import warn_once


class RubricGroup(Rubric):
    """Scores with every rubric in ``rubrics`` and sums the results.

    Functions added to the group (``add_reward_func``, or ``funcs=``) join
    the first member rubric, as ``add_reward_func`` did in 0.1.4 (0.1.4
    ignored ``funcs=`` given to the group; see docs/migrating.md).
    """

    def __init__(self, rubrics: Sequence[Rubric], **kwargs: Any):
        rubrics = list(rubrics)
        if not rubrics:
            raise ConfigError("RubricGroup must have at least one rubric", "pass a list of Rubric objects")
        for rubric in rubrics:
            if not isinstance(rubric, Rubric):
                raise ConfigError(f"RubricGroup member {rubric!r} is not a Rubric", "pass Rubric objects")
        kwargs.setdefault("parser", rubrics[0].parser)
        self.rubrics = rubrics  # before Rubric.__init__, which adds funcs= through add_reward_func
        super().__init__(**kwargs)

    # Upstream logged these warnings on every call; here once per process (same words).
    def add_reward_func(self, func: RewardFunc, weight: float = 1.0) -> None:
        """Add a reward function to the first member rubric (0.1.4)."""
        warn_once(
            self.logger, "rubric-group-add-func", "Adding reward function to the first rubric in the group."
        )
        self.rubrics[0].add_reward_func(func, weight)

    def add_metric(self, func: RewardFunc, weight: float = 0.0) -> None:
        """Add a metric (weight 0) to the first member rubric (0.1.8+)."""
        warn_once(self.logger, "rubric-group-add-metric", "Adding metric to the first rubric in the group.")
        self.rubrics[0].add_reward_func(func, weight)

    def add_class_object(self, name: str, obj: Any) -> None:
        """Give ``obj`` to the first member rubric's functions (as upstream 0.1.8+ does)."""
        warn_once(
            self.logger, "rubric-group-add-object", "Adding class object to the first rubric in the group."
        )
        self.rubrics[0].add_class_object(name, obj)

    def has_group_funcs(self) -> bool:
        return any(rubric.has_group_funcs() for rubric in self.rubrics)

    def get_reward_func_names(self) -> list[str]:
        return [name for rubric in self.rubrics for name in rubric.get_reward_func_names()]

    def get_reward_funcs(self) -> list[RewardFunc]:
        return [func for rubric in self.rubrics for func in rubric.get_reward_funcs()]

    def get_reward_weights(self) -> list[float]:
        return [weight for rubric in self.rubrics for weight in rubric.get_reward_weights()]

    @also_takes(score_state, when=state_form)
    async def score_rollout(
        self,
        prompt: Messages,
        completion: Messages,
        answer: Any,
        state: State,
        task: str = "default",
        info: Info | None = None,
        **kwargs: Any,
    ) -> RolloutScore:
        """Score one rollout with every member, in order, and sum rewards and same-named metrics."""
        parts = [
            await rubric.score_rollout(prompt, completion, answer, state, task, info, **kwargs)
            for rubric in self.rubrics
        ]
        metrics: dict[str, float] = {}
        for part in parts:
            for name, value in part.metrics.items():
                metrics[name] = metrics.get(name, 0.0) + value
        reward = finite_or_zero(sum(part.reward for part in parts))
        return RolloutScore(reward=reward, metrics={k: finite_or_zero(v) for k, v in metrics.items()})

    async def score_rollouts(self, *args: Any, **kwargs: Any) -> RolloutScores:
        """Score many rollouts with every member (arguments as ``Rubric.score_rollouts``) and sum."""
        return _sum_parts([await rubric.score_rollouts(*args, **kwargs) for rubric in self.rubrics])

    async def _group_scores(self, states: list[State], extra: dict[str, Any]) -> RolloutScores:
        """One group scored by every member, in order, summed (``score_group`` writes the states)."""
        return _sum_parts([await rubric._group_scores(states, extra) for rubric in self.rubrics])


def _sum_parts(parts: list[RolloutScores]) -> RolloutScores:
    """Rewards and same-named metrics of the members' scores, added up."""
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
