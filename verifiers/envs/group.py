"""``EnvGroup``: several environments behind one dataset, routed by ``task``.

The group's dataset is the concatenation of its members' datasets with the
``task`` column set to the member's name (``env_0``, ``env_1``, ... unless
``env_names`` is given); its eval split concatenates each member's eval split,
or its training split where it has none (as 0.1.4 did). Each rollout runs on the member its task names, and
is scored by that member's rubric; a metric of another member's rubric is 0.0
for it, so every result reports the same metric names. Unlike 0.1.4, which
ran a rollout of an unknown task on the first member, the group refuses it.

With ``weights`` (one positive number per member) the *training* dataset is a
weighted mixture instead: it has as many rows as the members' training sets
together, member ``k`` gets ``weights[k] / sum(weights)`` of them whatever its
own size (rows repeated or subsampled, seeded by ``seed``), and the members'
rows are interleaved so that every stretch of the dataset follows the weights.
The trainer reads rows through ``get_dataset()``, so its prompts follow the
weights; the eval split stays the plain concatenation.
"""

from __future__ import annotations

import json
import math
import numbers
import random
from collections.abc import Mapping, Sequence
from typing import Any

from verifiers.compat.forms import also_takes
from verifiers.compat.refused import refusing_getattr
from verifiers.envs.dataset_format import parse_info
from verifiers.envs.environment import Environment
from verifiers.errors import ConfigError
from verifiers.rubrics.rubric import Rubric, score_state, state_form
from verifiers.types import Info, Messages, RolloutScore, RolloutScores, SamplingArgs, State


class EnvGroupRubric(Rubric):
    """Scores each rollout with the rubric of the environment its task names.

    ``all_reward_names`` (sorted, as in 0.1.4) are the metric names of every
    member's rubric; a rollout reports 0.0 for those of other members. A task no
    member handles scores 0.0 (the group refuses to *run* such a rollout, see
    ``EnvGroup.get_env_for_task``).
    """

    def __init__(self, env_map: Mapping[str, Environment]):
        super().__init__()
        self.env_map = env_map
        names: set[str] = set()
        for env in env_map.values():
            try:
                names.update(env.rubric.get_reward_func_names())
            except Exception:  # a duck-typed rubric without the method
                continue
        self.all_reward_names = sorted(names)

    def get_reward_func_names(self) -> list[str]:
        return list(self.all_reward_names)

    @also_takes(score_state, when=state_form)
    async def score_rollout(
        self,
        prompt: Messages,
        completion: Messages,
        answer: str = "",
        state: State | None = None,
        task: str = "default",
        info: Info | None = None,
        **kwargs: Any,
    ) -> RolloutScore:
        state = state if state is not None else {}
        metrics = dict.fromkeys(self.all_reward_names, 0.0)
        env = self.env_map.get(task)
        if env is None:
            self.logger.warning("no environment in this EnvGroup handles task %r; it scores 0.0", task)
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


def check_weights(weights: Any, names: list[str]) -> list[float]:
    """``weights`` as floats, one per member; a ``ConfigError`` naming the bad value otherwise."""
    if isinstance(weights, (str, bytes, Mapping)) or not isinstance(weights, Sequence):
        raise ConfigError(
            f"EnvGroup weights must be a list with one number per env, got {type(weights).__name__}",
            hint=f"e.g. weights=[{', '.join('1.0' for _ in names)}] for envs {names}",
        )
    if len(weights) != len(names):
        raise ConfigError(
            f"EnvGroup got {len(names)} envs but {len(weights)} weights",
            hint="give one weight per env, in the order of envs",
        )
    out = []
    for i, (name, w) in enumerate(zip(names, weights, strict=True)):
        # bool is a numbers.Real; True as a weight is almost surely a mistake.
        if isinstance(w, bool) or not isinstance(w, numbers.Real) or not math.isfinite(w) or w <= 0:
            raise ConfigError(
                f"EnvGroup weights[{i}] (env '{name}') = {w!r} is not a positive finite number",
                hint="use a number > 0 such as 1.0 (weights are relative shares); "
                "leave the env out of the group to give it no share",
            )
        out.append(float(w))
    return out


def apportion(total: int, weights: list[float]) -> list[int]:
    """``total`` split in proportion to ``weights`` (largest remainders), at least 1 each."""
    quotas = [total * w / sum(weights) for w in weights]
    counts = [math.floor(q) for q in quotas]
    by_remainder = sorted(range(len(weights)), key=lambda k: counts[k] - quotas[k])
    for k in by_remainder[: total - sum(counts)]:
        counts[k] += 1
    # A weighted member must appear at all, even when its share rounds to no row.
    return [max(1, c) for c in counts]


def weighted_mixture(dataset: Any, weights: dict[str, float], seed: int = 0) -> Any:
    """Rows of ``dataset`` (with a ``task`` column) drawn by ``weights`` (see the module docstring).

    Each member's count comes from :func:`apportion`; a member with fewer rows
    than its count contributes whole copies of its rows plus a seeded sample of
    the rest, one with more contributes a seeded sample. Member ``k``'s ``c``
    rows then sit at positions ``(j + u_k) / c`` (``u_k`` seeded), merged in
    order of position, so any prefix of the result is within one row per member
    of the weighted share.
    """
    rows_by_task: dict[str, list[int]] = {name: [] for name in weights}
    for i, task in enumerate(dataset["task"]):
        rows_by_task[task].append(i)
    rng = random.Random(seed)
    counts = apportion(len(dataset), list(weights.values()))
    placed: list[tuple[float, int, int]] = []
    for k, (rows, count) in enumerate(zip(rows_by_task.values(), counts, strict=True)):
        copies, rest = divmod(count, len(rows))
        picked = rows * copies + rng.sample(rows, rest)
        rng.shuffle(picked)  # repeats and the sampled rows spread over the whole mixture
        offset = rng.random()
        placed += [((j + offset) / count, k, row) for j, row in enumerate(picked)]
    placed.sort()
    return dataset.select([row for _, _, row in placed])


class EnvGroup(Environment):
    """Route rollouts to member environments by ``task`` (see the module docstring).

    Args:
        envs: The member environments (one ``message_type``).
        env_names: Each member's task name (default ``env_0``, ``env_1``, ...).
        weights: Optional relative share of the training prompts per member
            (positive finite numbers, in the order of ``envs``); ``None``: each
            member contributes its whole training set once.
        seed: Seed of the weighted mixture (which rows are repeated or left out,
            and their order).
    """

    def __init__(
        self,
        envs: list[Environment],
        env_names: list[str] | None = None,
        weights: Sequence[float] | None = None,
        seed: int = 0,
        **kwargs: Any,
    ):
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
        self.weights = check_weights(weights, names) if weights is not None else None
        self.seed = seed
        train = [
            (n, e.dataset)
            for n, e in zip(names, envs, strict=True)
            if e.dataset is not None and len(e.dataset)
        ]
        # As in 0.1.4, a member without an eval split lends its training split to the group's.
        evals = [
            (n, e.eval_dataset if e.eval_dataset is not None else e.dataset)
            for n, e in zip(names, envs, strict=True)
            if e.eval_dataset is not None or e.dataset is not None
        ]
        dataset = _concat(train) if train else None
        if dataset is not None and self.weights is not None:
            empty = [n for n in names if n not in dict(train)]
            if empty:
                raise ConfigError(
                    f"EnvGroup env(s) {', '.join(empty)} have a weight but no training rows",
                    hint="give them a training dataset, or leave them out of the weighted group",
                )
            dataset = weighted_mixture(dataset, dict(zip(names, self.weights, strict=True)), seed)
        kwargs.setdefault("message_type", types.pop())
        kwargs.setdefault("rubric", EnvGroupRubric(self.env_map))
        super().__init__(dataset=dataset, eval_dataset=_concat(evals) if evals else None, **kwargs)

    def task_shares(self) -> dict[str, float]:
        """Each member's share of the training rows (the weights' shares when weighted)."""
        tasks = list(self.dataset["task"]) if self.dataset is not None else []
        return {name: tasks.count(name) / max(1, len(tasks)) for name in self.env_names}

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


# Names of upstream's module that are not offered here: refused in one line (verifiers.compat.refused).
__getattr__ = refusing_getattr(__name__)
