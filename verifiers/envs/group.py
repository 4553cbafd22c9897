"""``EnvGroup``: several environments behind one dataset, routed by ``task``.

The group's dataset is the concatenation of its members' datasets with the
``task`` column set to the member's name (``env_0``, ``env_1``, ... unless
``env_names`` is given). Each rollout runs on the member its task names, and
is scored by that member's rubric; a metric of another member's rubric is 0.0
for it, so every result reports the same metric names.
"""

from __future__ import annotations

import json
from typing import Any

from verifiers.envs.dataset_format import parse_info
from verifiers.envs.environment import Environment
from verifiers.errors import ConfigError
from verifiers.types import Info, Messages, RolloutScore, RolloutScores, SamplingArgs, State


class EnvGroupRubric:
    """Scores each rollout with the rubric of the environment its task names."""

    def __init__(self, env_map: dict[str, Environment]):
        self.env_map = env_map

    def get_reward_func_names(self) -> list[str]:
        names: list[str] = []
        for env in self.env_map.values():
            try:
                names += [n for n in env.rubric.get_reward_func_names() if n not in names]
            except Exception:  # a duck-typed rubric without the method
                continue
        return names

    async def score_rollout(
        self,
        prompt: Messages,
        completion: Messages,
        answer: str,
        state: State,
        task: str = "default",
        info: Info | None = None,
    ) -> RolloutScore:
        metrics = {name: 0.0 for name in self.get_reward_func_names()}
        env = self.env_map.get(task)
        if env is None:
            return RolloutScore(reward=0.0, metrics=metrics)
        score = await env.score_rollout(prompt, completion, answer, state, task, info or {})
        metrics.update(score.metrics)
        return RolloutScore(reward=score.reward, metrics=metrics)

    async def score_rollouts(
        self,
        prompts: list[Messages],
        completions: list[Messages],
        answers: list[str],
        states: list[State],
        tasks: list[str],
        infos: list[Info],
        max_concurrent: int = -1,
    ) -> RolloutScores:
        import asyncio

        scores = await asyncio.gather(
            *(
                self.score_rollout(p, c, a, s, t, i)
                for p, c, a, s, t, i in zip(prompts, completions, answers, states, tasks, infos, strict=True)
            )
        )
        names = self.get_reward_func_names()
        for s in scores:
            names += [k for k in s.metrics if k not in names]
        return RolloutScores(
            reward=[s.reward for s in scores],
            metrics={n: [s.metrics.get(n, 0.0) for s in scores] for n in names},
        )


def _concat(named: list[tuple[str, Any]]) -> Any:
    """One dataset of ``prompt, answer, info (JSON), task, id`` rows from each member's split."""
    from datasets import Dataset

    columns: dict[str, list[Any]] = {"prompt": [], "answer": [], "info": [], "task": []}
    for name, dataset in named:
        n = len(dataset)
        columns["prompt"] += list(dataset["prompt"])
        columns["answer"] += list(dataset["answer"])
        # JSON: members' info dicts differ in keys and types, which one Arrow column cannot hold.
        columns["info"] += [json.dumps(parse_info(i)) for i in dataset["info"]]
        columns["task"] += [name] * n
    columns["id"] = list(range(len(columns["task"])))
    return Dataset.from_dict(columns)


class EnvGroup(Environment):
    """Route rollouts to member environments by ``task`` (see the module docstring)."""

    def __init__(self, envs: list[Environment], env_names: list[str] | None = None, **kwargs: Any):
        envs = list(envs)
        if not envs:
            raise ConfigError("EnvGroup needs at least one environment", hint="pass envs=[env_a, env_b]")
        names = list(env_names) if env_names is not None else [f"env_{i}" for i in range(len(envs))]
        if len(names) != len(envs):
            raise ConfigError(f"EnvGroup got {len(envs)} envs but {len(names)} env_names")
        if len(set(names)) != len(names):
            raise ConfigError(f"EnvGroup env_names must be distinct, got {names}")
        types = {env.message_type for env in envs}
        if len(types) > 1:
            raise ConfigError(
                "EnvGroup members mix chat and completion message types",
                hint="group environments of one message_type",
            )
        self.envs = envs
        self.env_names = names
        self.env_map: dict[str, Environment] = dict(zip(names, envs, strict=True))
        train = [(n, e.dataset) for n, e in zip(names, envs, strict=True) if e.dataset is not None]
        evals = [(n, e.eval_dataset) for n, e in zip(names, envs, strict=True) if e.eval_dataset is not None]
        kwargs.setdefault("message_type", types.pop())
        kwargs.setdefault("rubric", EnvGroupRubric(self.env_map))
        super().__init__(
            dataset=_concat(train) if train else None,
            eval_dataset=_concat(evals) if evals else None,
            **kwargs,
        )

    def get_env_for_task(self, task: str) -> Environment:
        """The member environment that handles ``task``."""
        try:
            return self.env_map[task]
        except KeyError:
            raise ConfigError(
                f"no environment in this EnvGroup handles task {task!r}",
                hint=f"use one of: {', '.join(self.env_names)}",
            ) from None

    async def rollout(
        self,
        client: Any,
        model: str,
        prompt: Messages,
        answer: str = "",
        task: str = "default",
        info: Info | None = None,
        sampling_args: SamplingArgs | None = None,
        **kwargs: Any,
    ) -> tuple[Messages, State]:
        env = self.get_env_for_task(task)
        args = {**self.sampling_args, **(sampling_args or {})}
        return await env.rollout(
            client, model, prompt, answer=answer, task=task, info=info, sampling_args=args, **kwargs
        )
