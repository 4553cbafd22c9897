"""Rubric: scores rollouts with weighted reward functions.

A reward function names the arguments it wants, out of ``prompt, completion,
answer, state, task, info, parser`` (plus whatever a subclass provides, listed
in ``reward_arg_names``), or takes ``**kwargs`` to receive all of them. It may
be sync or async and returns a number.

Scoring rules:

- reward = sum of ``weight * score``; metrics = each function's raw score
  under its ``__name__`` (weight 0 means tracked, not rewarded).
- A result counts if ``float()`` takes it (a numeric string too, as in
  0.1.4). Keyword arguments given to ``score_rollout`` / ``score_rollouts``
  beyond the standard ones reach the functions that name them or take
  ``**kwargs`` (0.1.4).
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
import contextlib
import inspect
import logging
import math
import numbers
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from verifiers.compat.forms import also_takes
from verifiers.compat.refused import refusing_getattr
from verifiers.errors import ConfigError
from verifiers.failures import REWARD_NONFINITE, REWARD_RAISED
from verifiers.parsers.parser import Parser
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
"""Values of ``state["reward_errors"][name]`` (defined with the failure kinds in failures.py)."""


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


async def score_state(self: Any, state: State, score_sem: Any = None, **kwargs: Any) -> None:
    """``score_rollout(state, score_sem)``, 0.1.8+'s form: score the rollout the state holds and write
    ``reward`` and ``metrics`` into it (``score_sem``, when given, is held while scoring)."""
    async with score_sem if score_sem is not None else contextlib.nullcontext():
        score = await self.score_rollout(
            state["prompt"], state["completion"], state.get("answer", ""), state,
            task=state.get("task", "default"), info=state.get("info"), **kwargs,
        )  # fmt: skip
    state["reward"], state["metrics"] = score.reward, score.metrics


def state_form(*args: Any, **kwargs: Any) -> bool:
    """A ``score_rollout`` call in 0.1.8+'s form: a state first (0.1.4's first argument, the
    prompt, is a string or a list), or the state alone by name."""
    return (
        bool(args)
        and isinstance(args[0], dict)
        or (not args and "state" in kwargs and "prompt" not in kwargs)
    )


@dataclass
class _RewardSpec:
    """A reward function with what the rubric learned about it when it was added."""

    func: RewardFunc
    name: str
    weight: float
    wants: tuple[str, ...] | None  # None: the function takes **kwargs and gets everything
    params: frozenset[str]  # every name it takes by keyword (for extra scoring kwargs)
    is_async: bool
    log_key: str
    slow: bool = False
    group: bool = False  # scored over a whole group at once (plural parameters, 0.1.8+)


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

    group_arg_names: ClassVar[tuple[str, ...]] = (
        "prompts",
        "completions",
        "answers",
        "states",
        "tasks",
        "infos",
    )
    """Plural names: a function taking any of them is a group reward function (0.1.8+). It is
    called once per group of rollouts of one example with aligned lists, plus the rubric's
    objects (``parser``, ...), and returns one score per rollout."""

    def __getattr__(self, name: str) -> Any:
        # Reached only when the normal lookup fails: a 0.1.x member that is not offered here is
        # refused in one line saying why (verifiers.compat.refused.REFUSED_MEMBERS).
        from verifiers.compat.refused import refuse_member

        refuse_member(self, name)

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
        self.class_objects: dict[str, Any] = getattr(self, "class_objects", None) or {}
        self.reward_funcs: list[RewardFunc] = []
        self.reward_weights: list[float] = []
        self._specs: list[_RewardSpec] = []
        funcs = list(funcs or [])
        weights = [1.0] * len(funcs) if weights is None else list(weights)
        if len(weights) != len(funcs):
            raise ConfigError(  # upstream's words first (0.1.11+ raised this ValueError)
                f"Number of weights ({len(weights)}) must match number of functions ({len(funcs)})",
                f"{type(self).__name__}: pass one weight per function, or no weights for 1.0 each",
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

    def add_metric(self, func: RewardFunc, weight: float = 0.0) -> None:
        """Add a function tracked as a metric only (weight 0 by default; 0.1.8+)."""
        self.add_reward_func(func, weight)

    def add_class_object(self, name: str, obj: Any) -> None:
        """Pass ``obj`` to reward functions that take an argument called ``name`` (0.1.8+).

        Add it before the functions that use it: a function is checked when it is added.
        """
        self.class_objects[name] = obj

    def has_group_funcs(self) -> bool:
        """True if any reward function is scored over whole groups (see ``group_arg_names``)."""
        return any(spec.group for spec in self._specs)

    def get_reward_func_names(self) -> list[str]:
        return [spec.name for spec in self._specs]

    def get_reward_funcs(self) -> list[RewardFunc]:
        return list(self.reward_funcs)

    async def teardown(self) -> None:
        """Release what the rubric holds (0.1.12+; called when its environment is torn down): nothing here."""

    @property
    def funcs(self) -> list[RewardFunc]:
        """The reward functions (0.1.8+'s name; ``get_reward_funcs()``)."""
        return self.get_reward_funcs()

    @property
    def weights(self) -> list[float]:
        """Their weights (0.1.8+'s name; ``get_reward_weights()``)."""
        return self.get_reward_weights()

    def get_reward_weights(self) -> list[float]:
        return list(self.reward_weights)

    def _make_spec(
        self, func: RewardFunc, weight: float, check_name: bool = True, given: frozenset[str] = frozenset()
    ) -> _RewardSpec:
        kind = type(self).__name__
        if not callable(func):
            raise ConfigError(f"{kind} reward function {func!r} is not callable", "pass a function")
        name = reward_func_name(func)
        if not isinstance(weight, numbers.Real) or not math.isfinite(weight):
            raise ConfigError(f"{kind} weight {weight!r} for {name!r} is not a finite number", "use a float")
        if check_name and any(spec.name == name for spec in self._specs):
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
        # A wrapper (functools.wraps, update_wrapper(partial(f, key=...), f)) is called with the
        # arguments its wrapped function names, as upstream does; a parameter counts as missing
        # only if the wrapper itself needs it too (a partial may have bound it).
        own = signature
        if hasattr(func, "__wrapped__"):
            try:
                own = inspect.signature(func, follow_wrapped=False)
            except (TypeError, ValueError):
                pass
        own_required = {
            p.name
            for p in own.parameters.values()
            if p.default is inspect.Parameter.empty
            and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
        }
        wants: list[str] = []
        takes_all = False
        params = frozenset(
            p.name
            for p in signature.parameters.values()
            if p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
        )
        group = bool(params & set(self.group_arg_names)) or _returns_list(signature)
        objects = tuple(self.class_objects)
        if group:  # the plural names plus the rubric's objects (parser, judge, ...)
            allowed = (
                self.group_arg_names
                + tuple(n for n in self.reward_arg_names if n not in _ROLLOUT_ARGS)
                + objects
            )
        else:
            allowed = self.reward_arg_names + objects
        for param in signature.parameters.values():
            if param.kind is inspect.Parameter.VAR_KEYWORD:
                takes_all = True
            elif param.kind is inspect.Parameter.VAR_POSITIONAL:
                continue
            elif param.name in allowed and param.kind is not inspect.Parameter.POSITIONAL_ONLY:
                wants.append(param.name)
            elif (
                param.default is inspect.Parameter.empty
                and param.name not in given
                and param.name in own_required
            ):
                raise ConfigError(
                    f"reward function {name!r} needs argument {param.name!r}, which {kind} does not pass",
                    f"take only {', '.join(allowed)} (by keyword) or **kwargs, or give it a default",
                )
        qualname = getattr(func, "__qualname__", name)
        return _RewardSpec(
            func=func,
            name=name,
            weight=float(weight),
            wants=None if takes_all else tuple(wants),
            params=params,
            is_async=is_async_callable(func),
            log_key=f"rubric-reward-error:{getattr(func, '__module__', '')}.{qualname}",
            group=group,
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
            **self.class_objects,
        }

    async def _call(
        self, spec: _RewardSpec, args: dict[str, Any], extra: dict[str, Any] | None = None
    ) -> tuple[float, str | None]:
        """Run one reward function: ``(score, problem)`` with problem None, ``RAISED`` or
        ``NONFINITE``; never raises (except cancellation).

        ``extra``: keyword arguments given to ``score_rollout`` beyond the standard
        ones; as in 0.1.4 they reach functions that take ``**kwargs`` or name them.
        """
        if spec.wants is None:
            kwargs = {**args, **extra} if extra else args
        else:
            kwargs = {name: args[name] for name in spec.wants}
            if extra:
                kwargs.update((k, v) for k, v in extra.items() if k in spec.params)
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
        extra: dict[str, Any] | None = None,
    ) -> tuple[list[float], list[bool]]:
        """Every function's score and error flag for one rollout, in function order (failures
        are also noted in ``state["reward_errors"]``); a group function sees a group of one."""
        rows = [(prompt, completion, answer, state, task, info)]
        scores, errors = await self._score_rows(specs, rows, [[0]], extra)
        return scores[0], errors[0]

    def _row_args(self, row: tuple) -> dict[str, Any]:
        prompt, completion, answer, state, task, info = row
        return self._reward_func_args(
            prompt,
            completion,
            answer,
            state if state is not None else {},
            task if task is not None else "default",
            info if info is not None else {},
        )

    async def _score_rows(
        self,
        specs: list[_RewardSpec],
        rows: list[tuple],
        groups: list[list[int]],
        extra: dict[str, Any] | None,
        max_concurrent: int = -1,
    ) -> tuple[list[list[float]], list[list[bool]]]:
        """Scores and error flags, ``[rollout][function]``, of ``rows`` (``(prompt, completion,
        answer, state, task, info)`` each); ``groups`` partitions the row indices for group functions.

        Per-rollout functions run first, in order within a rollout, concurrently across
        rollouts; then each group function once per group, in order.
        """
        n = len(rows)
        args = [self._row_args(row) for row in rows]
        scores = [[0.0] * len(specs) for _ in range(n)]
        errors = [[False] * len(specs) for _ in range(n)]
        problems: list[dict[str, str]] = [{} for _ in range(n)]
        single = [(j, spec) for j, spec in enumerate(specs) if not spec.group]

        async def one(i: int) -> None:
            for j, spec in single:
                score, problem = await self._call(spec, args[i], extra)
                scores[i][j] = score
                if problem is not None:
                    errors[i][j] = True
                    problems[i][spec.name] = problem

        if single:
            if not self.parallelize_scoring:
                for i in range(n):
                    await one(i)
            elif max_concurrent > 0:
                semaphore = asyncio.Semaphore(max_concurrent)

                async def bounded(i: int) -> None:
                    async with semaphore:
                        await one(i)

                await asyncio.gather(*(bounded(i) for i in range(n)))
            else:
                await asyncio.gather(*(one(i) for i in range(n)))
        for j, spec in enumerate(specs):
            if not spec.group:
                continue
            for members in groups:
                values, flags = await self._call_group(spec, [args[i] for i in members], extra)
                for i, value, problem in zip(members, values, flags, strict=True):
                    scores[i][j] = value
                    if problem is not None:
                        errors[i][j] = True
                        problems[i][spec.name] = problem
        for i, row in enumerate(rows):
            record_reward_errors(row[3], problems[i])
        return scores, errors

    async def _call_group(
        self, spec: _RewardSpec, member_args: list[dict[str, Any]], extra: dict[str, Any] | None
    ) -> tuple[list[float], list[str | None]]:
        """Run one group function over one group: a score and a problem (None, ``RAISED`` or
        ``NONFINITE``) per member. A function that raises, or returns other than one number per
        member, scores the whole group 0; a non-finite entry scores that member 0."""
        n = len(member_args)
        everything: dict[str, Any] = {
            k: v for k, v in member_args[0].items() if k not in _ROLLOUT_ARGS
        }  # the rubric's objects (parser, judge, ...)
        for plural, singular in zip(self.group_arg_names, _PLURAL_OF, strict=True):
            everything[plural] = [a[singular] for a in member_args]
        if spec.wants is None:
            kwargs = {**everything, **(extra or {})}
        else:
            kwargs = {name: everything[name] for name in spec.wants if name in everything}
            if extra:
                kwargs.update((k, v) for k, v in extra.items() if k in spec.params)
        try:
            result = spec.func(**kwargs)
            if inspect.isawaitable(result):
                result = await result
            if isinstance(result, (str, bytes)) or not hasattr(result, "__len__") or len(result) != n:
                raise RewardValueError(f"returned {result!r}, not a list of {n} scores (one per rollout)")
        except Exception as e:
            warn_once(
                self.logger,
                spec.log_key,
                "group reward function %r failed and scores 0.0 for the group (logged once; counted in "
                "metric %r): %s: %s",
                spec.name,
                f"{spec.name}_error",
                type(e).__name__,
                e,
            )
            return [0.0] * n, [RAISED] * n
        values: list[float] = []
        flags: list[str | None] = []
        for item in result:
            try:
                values.append(_to_score(item))
                flags.append(None)
            except RewardValueError as e:
                warn_once(self.logger, spec.log_key, "group reward function %r: an entry %s", spec.name, e)
                values.append(0.0)
                flags.append(NONFINITE if isinstance(e, NonFiniteRewardError) else RAISED)
        return values, flags

    def _weighted(self, specs: list[_RewardSpec], scores: list[float]) -> float:
        total = finite_or_zero(sum(spec.weight * score for spec, score in zip(specs, scores, strict=True)))
        return total + 0.0  # normalise -0.0

    # -- public scoring -----------------------------------------------------------

    async def call_reward_func(
        self,
        func: RewardFunc,
        prompt: Messages,
        completion: Messages,
        answer: Any,
        state: State,
        task: str = "default",
        info: Info | None = None,
        **kwargs: Any,
    ) -> float:
        """Call one reward function as the rubric would (0.1.4's public method) and return its score.

        ``func`` gets the arguments it names (or all of them with ``**kwargs``):
        the rollout's, the rubric's objects (``parser``, a judge's ``judge``) and
        ``kwargs``. A function that raises, or returns something that is not a
        finite number, scores 0.0 and is logged once (0.1.4 let NaN through).
        """
        spec = self._make_spec(func, 1.0, check_name=False, given=frozenset(kwargs))
        args = self._reward_func_args(
            prompt, completion, answer, state, task if task is not None else "default", info or {}
        )
        score, problem = await self._call(spec, args, kwargs)
        if problem is not None:
            record_reward_errors(state, {spec.name: problem})
        return score

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
        """Score one rollout. Extra keyword arguments go to the functions that take them (0.1.4)."""
        specs = list(self._specs)
        scores, errors = await self._score(specs, prompt, completion, answer, state, task, info, kwargs)
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
        rows_in = [(prompts[i], completions[i], answers[i], states[i], tasks[i], infos[i]) for i in range(n)]
        # 0.1.4 callers pass a flat batch; a group function sees each run of rollouts of one example.
        groups = consecutive_groups(rows_in) if any(spec.group for spec in specs) else [list(range(n))]
        all_scores, all_errors = await self._score_rows(specs, rows_in, groups, kwargs, max_concurrent)
        return self._collect(specs, list(zip(all_scores, all_errors, strict=True)))

    def _collect(self, specs: list[_RewardSpec], rows: list[tuple[list[float], list[bool]]]) -> RolloutScores:
        """``RolloutScores`` from per-rollout ``(scores, error flags)``."""
        metrics: dict[str, list[float]] = {
            spec.name: [scores[j] for scores, _ in rows] for j, spec in enumerate(specs)
        }
        for j, spec in enumerate(specs):
            flags = [errors[j] for _, errors in rows]
            if any(flags):
                metrics[f"{spec.name}_error"] = [1.0 if f else 0.0 for f in flags]
        return RolloutScores(reward=[self._weighted(specs, scores) for scores, _ in rows], metrics=metrics)

    async def score_group(
        self, states: Sequence[State], score_sem: Any = None, **kwargs: Any
    ) -> RolloutScores:
        """Score the rollouts of one example together (0.1.8+), reading each state's ``prompt``,
        ``completion``, ``answer``, ``task`` and ``info``; group functions see all of them at once.

        As upstream, each state also gets ``reward``, ``metrics`` and ``advantage`` (its reward
        minus the group's mean), and its trajectory steps without a reward or advantage get those.
        """
        states = list(states)
        async with score_sem if score_sem is not None else contextlib.nullcontext():  # 0.1.8-0.1.9
            scores = await self._group_scores(states, kwargs)
        apply_group_scores(states, scores)
        return scores

    async def _group_scores(self, states: list[State], extra: dict[str, Any]) -> RolloutScores:
        """:meth:`score_group`'s scores, without writing them into the states."""
        rows = [
            (
                s.get("prompt"),
                s.get("completion"),
                s.get("answer", ""),
                s,
                s.get("task", "default"),
                s.get("info") or {},
            )
            for s in states
        ]
        specs = list(self._specs)
        all_scores, all_errors = await self._score_rows(specs, rows, [list(range(len(rows)))], extra)
        return self._collect(specs, list(zip(all_scores, all_errors, strict=True)))


def consecutive_groups(rows: Sequence[tuple]) -> list[list[int]]:
    """Indices of ``rows`` split into runs with the same prompt, answer, task and info (the
    rollouts of one example, as ``eval_inputs`` and the trainer lay them out)."""
    groups: list[list[int]] = []
    last: Any = object()
    for i, (prompt, _completion, answer, _state, task, info) in enumerate(rows):
        key = repr((prompt, answer, task, info))
        if groups and key == last:
            groups[-1].append(i)
        else:
            groups.append([i])
            last = key
    return groups


def apply_group_scores(states: Sequence[State], scores: RolloutScores) -> None:
    """Write ``reward``, ``metrics`` and ``advantage`` into each state, as upstream's ``score_group``."""
    if not states:
        return
    mean = sum(scores.reward) / len(states)
    for i, state in enumerate(states):
        if not isinstance(state, dict):
            continue
        state["reward"] = scores.reward[i]
        state["advantage"] = scores.reward[i] - mean
        state["metrics"] = {name: values[i] for name, values in scores.metrics.items()}
        for step in state.get("trajectory") or []:
            if step.get("reward") is None:
                step["reward"] = state["reward"]
            if step.get("advantage") is None:
                step["advantage"] = state["advantage"]


_ROLLOUT_ARGS = ("prompt", "completion", "answer", "state", "task", "info")
_PLURAL_OF = ("prompt", "completion", "answer", "state", "task", "info")  # aligned with group_arg_names


def _returns_list(signature: inspect.Signature) -> bool:
    """True if the return annotation says list (``-> list``, ``-> list[float]``, also as a string)."""
    annotation = signature.return_annotation
    if annotation is list or getattr(annotation, "__origin__", None) is list:
        return True
    return isinstance(annotation, str) and (annotation == "list" or annotation.startswith("list["))


def _to_score(result: Any) -> float:
    """``result`` as a finite float, or ``RewardValueError``."""
    # Whatever float() accepts counts, numeric strings included, as in 0.1.4.
    if result is None:
        raise RewardValueError("returned None, not a number")
    try:
        value = float(result)
    except (TypeError, ValueError) as e:
        raise RewardValueError(f"returned {type(result).__name__}, not a number") from e
    if not math.isfinite(value):
        raise NonFiniteRewardError(f"returned {value}, not a finite number")
    return value


# Names of upstream's module that are not offered here: refused in one line (verifiers.compat.refused).
__getattr__ = refusing_getattr(__name__)
