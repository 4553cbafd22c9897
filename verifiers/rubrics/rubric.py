"""Rubric: scores rollouts with weighted reward functions.

A reward function names the arguments it wants, out of ``prompt, completion,
answer, state, task, info, parser`` (plus whatever a subclass provides, listed
in ``reward_arg_names``), or takes ``**kwargs`` to receive all of them. It may
be sync or async and returns a number.

Scoring rules:

- reward = sum of ``weight * score``; metrics = each function's raw score
  under its ``__name__`` (weight 0 means tracked, not rewarded).
- A function that raises, or returns something that is not a finite number,
  scores 0.0 for that rollout, is logged once per function, and sets the
  metric ``<name>_error`` to 1.0 for that rollout. Scoring never raises
  because of a reward function, and NaN/inf never leave a rubric. The
  rollout's ``state["reward_errors"]`` maps each such function's name to
  ``"raised"`` or ``"nonfinite"`` (NaN/inf), which the trainer counts as
  ``errors/reward_fn`` and ``errors/nonfinite_reward``.
- Within one rollout the functions run one after another, in order: they may
  share caches in ``state`` (a judge's answer, a parsed result), and a fixed
  order keeps those side effects deterministic. Concurrency is across rollouts.
- Sync functions run inline on the event loop while they are cheap. A thread
  hop costs more than a typical regex or string comparison and would make
  non-thread-safe functions (tokenizers) run concurrently, so only a function
  seen to take longer than ``INLINE_LIMIT_S`` on a call moves to
  ``asyncio.to_thread`` for its later calls, where it no longer stalls the
  other rollouts sharing the loop. ``parallelize_scoring=False`` keeps every
  call inline and scores rollouts one at a time.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import numbers
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from verifiers.errors import ConfigError
from verifiers.parsers.parser import Parser
from verifiers.rollout.failure import REWARD_NONFINITE, REWARD_RAISED
from verifiers.types import Info, Messages, RewardFunc, RolloutScore, RolloutScores, State
from verifiers.utils.async_utils import is_async_callable
from verifiers.utils.logging import warn_once

INLINE_LIMIT_S = 0.005
"""A sync reward function slower than this (seconds, on any call) runs in a thread from then on."""


class RewardValueError(ValueError):
    """A reward function returned something other than a finite number."""


class NonFiniteRewardError(RewardValueError):
    """A reward function returned NaN or an infinity."""


RAISED, NONFINITE = REWARD_RAISED, REWARD_NONFINITE
"""Values of ``state["reward_errors"][name]`` (defined with the failure kinds in rollout/failure.py)."""


def record_reward_errors(state: State | None, problems: dict[str, str]) -> None:
    """Note in the rollout's state which reward functions failed, and how."""
    if problems and isinstance(state, dict):
        state.setdefault("reward_errors", {}).update(problems)


def reward_func_name(func: Any) -> str:
    """The metric name of a reward function: its ``__name__`` (a partial's function's, a class's)."""
    name = getattr(func, "__name__", None)
    if not isinstance(name, str):
        name = getattr(getattr(func, "func", None), "__name__", None)  # functools.partial
    return name if isinstance(name, str) else type(func).__name__


def finite_or_zero(value: float) -> float:
    """``value`` if finite, else 0.0 (sums of huge finite scores can overflow)."""
    return value if math.isfinite(value) else 0.0


@dataclass
class _RewardSpec:
    """A reward function with what the rubric learned about it when it was added."""

    func: RewardFunc
    name: str
    weight: float
    wants: tuple[str, ...] | None  # None: the function takes **kwargs and gets everything
    is_async: bool
    log_key: str
    slow: bool = False


class Rubric:
    """Weighted reward functions that score rollouts.

    Args:
        funcs: reward functions (see the module docstring for how they are called).
        weights: one weight per function (default 1.0 each).
        parser: given to functions that take ``parser`` (default: a plain ``Parser``).
        parallelize_scoring: score a batch's rollouts concurrently and move slow
            sync functions to threads; False scores one rollout at a time, inline.
        **kwargs: become attributes of the rubric.
    """

    reward_arg_names: ClassVar[tuple[str, ...]] = (
        "prompt",
        "completion",
        "answer",
        "state",
        "task",
        "info",
        "parser",
    )
    """Argument names a reward function may take; subclasses that provide more extend this."""

    def __init__(
        self,
        funcs: Sequence[RewardFunc] | None = None,
        weights: Sequence[float] | None = None,
        parser: Parser | None = None,
        parallelize_scoring: bool = True,
        **kwargs: Any,
    ):
        self.logger = logging.getLogger(f"verifiers.rubrics.{type(self).__name__}")
        self.parser = parser if parser is not None else Parser()
        self.parallelize_scoring = parallelize_scoring
        for key, value in kwargs.items():
            setattr(self, key, value)
        self.reward_funcs: list[RewardFunc] = []
        self.reward_weights: list[float] = []
        self._specs: list[_RewardSpec] = []
        funcs = list(funcs or [])
        weights = [1.0] * len(funcs) if weights is None else list(weights)
        if len(weights) != len(funcs):
            raise ConfigError(
                f"{type(self).__name__} got {len(funcs)} reward functions but {len(weights)} weights",
                "pass one weight per function, or no weights for 1.0 each",
            )
        for func, weight in zip(funcs, weights, strict=True):
            self.add_reward_func(func, weight)

    # -- functions ------------------------------------------------------------

    def add_reward_func(self, func: RewardFunc, weight: float = 1.0) -> None:
        """Add a reward function; its metric is named after its ``__name__``."""
        spec = self._make_spec(func, weight)
        self._specs.append(spec)
        self.reward_funcs.append(func)
        self.reward_weights.append(spec.weight)

    def get_reward_func_names(self) -> list[str]:
        return [spec.name for spec in self._specs]

    def get_reward_funcs(self) -> list[RewardFunc]:
        return list(self.reward_funcs)

    def get_reward_weights(self) -> list[float]:
        return list(self.reward_weights)

    def _make_spec(self, func: RewardFunc, weight: float) -> _RewardSpec:
        kind = type(self).__name__
        if not callable(func):
            raise ConfigError(f"{kind} reward function {func!r} is not callable", "pass a function")
        name = reward_func_name(func)
        if not isinstance(weight, numbers.Real) or not math.isfinite(weight):
            raise ConfigError(f"{kind} weight {weight!r} for {name!r} is not a finite number", "use a float")
        if any(spec.name == name for spec in self._specs):
            raise ConfigError(
                f"{kind} already has a reward function named {name!r}",
                "give each function a distinct name; metrics are keyed by name",
            )
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError) as e:
            raise ConfigError(
                f"cannot read the signature of reward function {name!r}: {e}",
                "wrap it in a def that names its arguments",
            ) from e
        wants: list[str] = []
        takes_all = False
        for param in signature.parameters.values():
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                takes_all = True
            elif param.kind is inspect.Parameter.VAR_POSITIONAL:
                continue
            elif param.name in self.reward_arg_names and param.kind is not inspect.Parameter.POSITIONAL_ONLY:
                wants.append(param.name)
            elif param.default is inspect.Parameter.empty:
                raise ConfigError(
                    f"reward function {name!r} needs argument {param.name!r}, which {kind} does not pass",
                    f"take only {', '.join(self.reward_arg_names)} (by keyword) or **kwargs, or give it a default",
                )
        qualname = getattr(func, "__qualname__", name)
        return _RewardSpec(
            func=func,
            name=name,
            weight=float(weight),
            wants=None if takes_all else tuple(wants),
            is_async=is_async_callable(func),
            log_key=f"rubric-reward-error:{getattr(func, '__module__', '')}.{qualname}",
        )

    # -- calling ----------------------------------------------------------------

    def _reward_func_args(
        self, prompt: Messages, completion: Messages, answer: Any, state: State, task: str, info: Info
    ) -> dict[str, Any]:
        """Everything a reward function may receive; subclasses add their objects here."""
        return {
            "prompt": prompt,
            "completion": completion,
            "answer": answer,
            "state": state,
            "task": task,
            "info": info,
            "parser": self.parser,
        }

    async def _call(self, spec: _RewardSpec, args: dict[str, Any]) -> tuple[float, str | None]:
        """Run one reward function: ``(score, problem)`` with problem None, ``RAISED`` or
        ``NONFINITE``; never raises (except cancellation)."""
        kwargs = args if spec.wants is None else {name: args[name] for name in spec.wants}
        try:
            if spec.is_async:
                result = await spec.func(**kwargs)
            elif spec.slow and self.parallelize_scoring:
                result = await asyncio.to_thread(spec.func, **kwargs)
            else:
                start = time.perf_counter()
                result = spec.func(**kwargs)
                if time.perf_counter() - start > INLINE_LIMIT_S:
                    spec.slow = True
            if inspect.isawaitable(result):  # a sync wrapper that returned a coroutine
                result = await result
            return _to_score(result), None
        except Exception as e:
            where = ""
            frames = traceback.extract_tb(e.__traceback__)
            if frames and not isinstance(e, RewardValueError):
                where = f" at {frames[-1].filename}:{frames[-1].lineno}"
            warn_once(
                self.logger,
                spec.log_key,
                "reward function %r failed%s and scores 0.0 (logged once; counted in metric %r): %s: %s",
                spec.name,
                where,
                f"{spec.name}_error",
                type(e).__name__,
                e,
            )
            return 0.0, NONFINITE if isinstance(e, NonFiniteRewardError) else RAISED

    async def _score(
        self,
        specs: list[_RewardSpec],
        prompt: Messages,
        completion: Messages,
        answer: Any,
        state: State | None,
        task: str | None,
        info: Info | None,
    ) -> tuple[list[float], list[bool]]:
        """Every function's score and error flag for one rollout, in function order (failures
        are also noted in ``state["reward_errors"]``)."""
        args = self._reward_func_args(
            prompt,
            completion,
            answer,
            state if state is not None else {},
            task if task is not None else "default",
            info if info is not None else {},
        )
        scores: list[float] = []
        errors: list[bool] = []
        problems: dict[str, str] = {}
        for spec in specs:
            score, problem = await self._call(spec, args)
            scores.append(score)
            errors.append(problem is not None)
            if problem is not None:
                problems[spec.name] = problem
        record_reward_errors(state, problems)
        return scores, errors

    def _weighted(self, specs: list[_RewardSpec], scores: list[float]) -> float:
        total = finite_or_zero(sum(spec.weight * score for spec, score in zip(specs, scores, strict=True)))
        return total + 0.0  # normalise -0.0

    # -- public scoring -----------------------------------------------------------

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
        """Score one rollout. Extra keyword arguments are accepted and ignored."""
        specs = list(self._specs)
        scores, errors = await self._score(specs, prompt, completion, answer, state, task, info)
        metrics = {spec.name: score for spec, score in zip(specs, scores, strict=True)}
        for spec, errored in zip(specs, errors, strict=True):
            if errored:
                metrics[f"{spec.name}_error"] = 1.0
        return RolloutScore(reward=self._weighted(specs, scores), metrics=metrics)

    async def score_rollouts(
        self,
        prompts: Sequence[Messages],
        completions: Sequence[Messages],
        answers: Sequence[Any],
        states: Sequence[State],
        tasks: Sequence[str] | None = None,
        infos: Sequence[Info] | None = None,
        max_concurrent: int = -1,
        **kwargs: Any,
    ) -> RolloutScores:
        """Score many rollouts (aligned lists); ``max_concurrent > 0`` bounds how many at once.

        Every metric list has one entry per rollout; ``<name>_error`` appears
        once any rollout's function failed, with 0.0 for the others.
        """
        n = len(prompts)
        tasks = ["default"] * n if tasks is None else tasks
        infos = [{} for _ in range(n)] if infos is None else infos
        lengths = {len(x) for x in (completions, answers, states, tasks, infos)}
        if lengths != {n}:
            raise ConfigError(
                f"score_rollouts got lists of different lengths: prompts={n}, completions={len(completions)}, "
                f"answers={len(answers)}, states={len(states)}, tasks={len(tasks)}, infos={len(infos)}",
                "pass one entry per rollout in every list",
            )
        specs = list(self._specs)

        def one(i: int):
            return self._score(specs, prompts[i], completions[i], answers[i], states[i], tasks[i], infos[i])

        if not self.parallelize_scoring:
            rows = [await one(i) for i in range(n)]
        elif max_concurrent > 0:
            semaphore = asyncio.Semaphore(max_concurrent)

            async def bounded(i: int):
                async with semaphore:
                    return await one(i)

            rows = await asyncio.gather(*(bounded(i) for i in range(n)))
        else:
            rows = await asyncio.gather(*(one(i) for i in range(n)))

        metrics: dict[str, list[float]] = {
            spec.name: [scores[j] for scores, _ in rows] for j, spec in enumerate(specs)
        }
        for j, spec in enumerate(specs):
            flags = [errors[j] for _, errors in rows]
            if any(flags):
                metrics[f"{spec.name}_error"] = [1.0 if f else 0.0 for f in flags]
        return RolloutScores(reward=[self._weighted(specs, scores) for scores, _ in rows], metrics=metrics)


def _to_score(result: Any) -> float:
    """``result`` as a finite float, or ``RewardValueError``."""
    if result is None or isinstance(result, (str, bytes)):
        raise RewardValueError(f"returned {type(result).__name__} {result!r:.50}, not a number")
    try:
        value = float(result)
    except (TypeError, ValueError) as e:
        raise RewardValueError(f"returned {type(result).__name__}, not a number") from e
    if not math.isfinite(value):
        raise NonFiniteRewardError(f"returned {value}, not a finite number")
    return value
