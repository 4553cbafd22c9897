"""``Environment``: datasets in, scored rollouts out.

An environment owns a dataset (and optionally an eval split), a parser and a
rubric. Subclasses implement :meth:`Environment.rollout`; this base class runs
many rollouts concurrently (:meth:`a_generate`), scores each one as soon as it
finishes, and offers the sync wrappers ``generate`` / ``evaluate``.

Failure policy (see docs/architecture.md, "Rollout state"): a rollout that
fails is a value (``state["failure"]``, a ``RolloutFailure`` whose ``kind`` says
why, and ``state["error"]``, its message; reward 0, counted in the metric
``rollout_errors``); it never raises out of ``a_generate``. A rubric whose
reward comes back NaN or infinite scores 0 instead (noted in
``state["reward_errors"]["reward"] = "nonfinite"``, logged once). One exception: if
*every* rollout failed because the model server could not be reached,
``a_generate`` (and so ``generate`` / ``evaluate``) raises one
``ServerUnreachableError`` naming the URL, since all-zero rewards would hide a
dead server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import logging
import math
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from verifiers.envs.dataset_format import build_prompt, format_dataset, inputs_to_rows
from verifiers.envs.model_client import call_model
from verifiers.envs.results import ERROR_METRIC, collect_outputs, raise_if_unreachable, results_dataset
from verifiers.envs.state import new_state
from verifiers.errors import ConfigError, ServerError
from verifiers.rollout.failure import (
    REWARD_NONFINITE,
    FailureKind,
    failure_of,
    format_error,
    model_call_kind,
    record_failure,
)
from verifiers.types import (
    ChatMessage,
    GenerateOutputs,
    Info,
    Messages,
    MessageType,
    ProcessedOutputs,
    RolloutScore,
    SamplingArgs,
    State,
)
from verifiers.utils.async_utils import run_sync
from verifiers.utils.logging import warn_once

ProgressCallback = Callable[[int, int], Any]
__all__ = ["ERROR_METRIC", "Environment", "ProgressCallback", "blocking"]
T = TypeVar("T")


def blocking(async_method: Callable[..., Awaitable[T]], doc: str) -> Callable[..., T]:
    """The blocking twin of an async method (``generate`` of ``a_generate``): same signature.

    It calls ``self.<async name>`` by name, so a subclass that overrides the async
    method changes the blocking one too, and runs it with ``run_sync`` (works
    inside a running event loop, e.g. Jupyter).
    """
    name = async_method.__name__

    @functools.wraps(async_method)
    def method(self: Any, *args: Any, **kwargs: Any) -> T:
        return run_sync(getattr(self, name)(*args, **kwargs))

    method.__name__ = name.removeprefix("a_")
    method.__qualname__ = method.__qualname__.rsplit(".", 1)[0] + "." + method.__name__
    method.__doc__ = doc
    return method


class Environment(ABC):
    """Base class of every environment (see the 0.1.x API in the docs)."""

    def __init__(
        self,
        dataset: Any = None,
        eval_dataset: Any = None,
        system_prompt: str | None = None,
        few_shot: list[ChatMessage] | None = None,
        parser: Any = None,
        rubric: Any = None,
        sampling_args: SamplingArgs | None = None,
        message_type: MessageType = "chat",
        oai_tools: list[dict] | None = None,
        max_workers: int = 512,
        **kwargs: Any,
    ):
        self.logger = logging.getLogger(f"verifiers.envs.{type(self).__name__}")
        if message_type not in ("chat", "completion"):
            raise ConfigError(f"message_type must be 'chat' or 'completion', got {message_type!r}")
        if message_type == "completion" and oai_tools:
            raise ConfigError("tools need chat messages", hint="use message_type='chat' with oai_tools")
        self.message_type: MessageType = message_type
        self.system_prompt = system_prompt
        self.few_shot = list(few_shot or [])
        if parser is None:
            from verifiers.parsers.parser import Parser

            parser = Parser()
        self.parser = parser
        if rubric is None:
            from verifiers.rubrics.rubric import Rubric

            rubric = Rubric(parser=self.parser)
        self.rubric = rubric
        self.sampling_args: SamplingArgs = dict(sampling_args or {})
        self.oai_tools = oai_tools
        self.max_workers = max_workers
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        # 0.1.x behaviour: any extra keyword becomes an attribute (env-specific settings).
        for key, value in kwargs.items():
            setattr(self, key, value)
        if dataset is None and eval_dataset is None:
            raise ConfigError(
                f"{type(self).__name__} needs a dataset",
                hint="pass dataset= and/or eval_dataset= (a datasets.Dataset with a 'question' or 'prompt' column)",
            )
        self.dataset = self.format_dataset(dataset, "dataset") if dataset is not None else None
        self.eval_dataset = (
            self.format_dataset(eval_dataset, "eval_dataset") if eval_dataset is not None else None
        )

    # -- datasets ------------------------------------------------------------
    def format_dataset(self, dataset: Any, name: str = "dataset") -> Any:
        """Add the standard columns (see ``dataset_format.format_dataset``); override to customise."""
        return format_dataset(dataset, self.system_prompt, self.few_shot, self.message_type, name)

    def format_prompt(self, question: str) -> Messages:
        """The prompt this env builds for a question (system prompt + few-shot + question)."""
        return build_prompt(question, self.system_prompt, self.few_shot, self.message_type)

    @staticmethod
    def _take(dataset: Any, n: int, seed: int | None) -> Any:
        if seed is not None:
            dataset = dataset.shuffle(seed=seed)
        if n is not None and n > 0:
            dataset = dataset.select(range(min(n, len(dataset))))
        return dataset

    def get_dataset(self, n: int = -1, seed: int | None = None) -> Any:
        """The training split: shuffled with ``seed`` if given, then the first ``n`` rows (all if ``n <= 0``)."""
        if self.dataset is None:
            raise ConfigError(
                f"{type(self).__name__} has no training dataset", hint="pass dataset= to the environment"
            )
        return self._take(self.dataset, n, seed)

    def get_eval_dataset(self, n: int = -1, seed: int | None = None) -> Any:
        """The eval split (falls back to the training split, with a warning)."""
        if self.eval_dataset is None:
            self.logger.warning(
                "%s has no eval_dataset; evaluating on the training dataset", type(self).__name__
            )
            return self.get_dataset(n, seed)
        return self._take(self.eval_dataset, n, seed)

    # -- model calls -----------------------------------------------------------
    def _get_executor(self) -> concurrent.futures.ThreadPoolExecutor:
        """Threads for sync clients and sync tools (``max_workers`` of them), created on first use."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                max_workers=self.max_workers, thread_name_prefix=f"verifiers-{type(self).__name__}"
            )
        return self._executor

    async def get_model_response(
        self,
        client: Any,
        model: str,
        prompt: Messages,
        oai_tools: list[dict] | None = None,
        sampling_args: SamplingArgs | None = None,
        message_type: MessageType | None = None,
    ) -> Any:
        """One chat/completion call; returns the SDK response (token data requested, see model_client).

        Raises ``ServerUnreachableError`` (with the URL), ``ServerTimeoutError``
        or ``ServerError``; a prompt over the context window raises
        ``PromptTooLongError``.
        """
        return await call_model(
            client,
            model,
            prompt,
            message_type=message_type or self.message_type,
            sampling_args=self.sampling_args if sampling_args is None else sampling_args,
            oai_tools=oai_tools,
            executor=self._get_executor(),
        )

    def tools_for(self, info: Info) -> list[dict] | None:
        """The tool schemas for one example: ``info["oai_tools"]`` (list or JSON string) overrides the env's."""
        tools = info.get("oai_tools") if info else None
        if isinstance(tools, str):
            tools = json.loads(tools)
        return tools if tools else self.oai_tools

    # -- one rollout -------------------------------------------------------------
    @abstractmethod
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
        """Run one episode; return ``(completion, state)`` (``completion`` holds only the new messages)."""

    async def _safe_rollout(self, client: Any, model: str, row: dict, sampling_args: SamplingArgs, **kwargs):
        """``rollout``, with any exception turned into a failed-rollout value."""
        try:
            completion, state = await self.rollout(
                client,
                model,
                row["prompt"],
                answer=row["answer"],
                task=row["task"],
                info=row["info"],
                sampling_args=sampling_args,
                **kwargs,
            )
        except Exception as err:
            warn_once(
                self.logger,
                f"{type(self).__name__}.rollout:{type(err).__name__}",
                "%s.rollout failed (%s); the rollout scores 0 (further failures are counted, not logged)",
                type(self).__name__,
                format_error(err),
            )
            state = new_state(row["prompt"], row["answer"], row["task"], row["info"])
            # A model call a custom rollout did not catch keeps its kind (an outage stays an outage).
            kind = model_call_kind(err) if isinstance(err, ServerError) else FailureKind.ROLLOUT
            record_failure(state, kind, err)
            completion = state["completion"]
        # Custom rollouts may return a partial state: fill in the contract's keys.
        base = new_state(row["prompt"], row["answer"], row["task"], row["info"])
        for key, value in base.items():
            state.setdefault(key, value)
        # A 0.1.x rollout may set only state["error"]: give it its typed failure.
        state["failure"] = failure_of(state)
        state["completion"] = completion
        return completion, state

    # -- scoring -----------------------------------------------------------------
    def metric_names(self) -> list[str]:
        """Metric names every result reports (missing ones are filled with 0.0)."""
        try:
            return list(self.rubric.get_reward_func_names())
        except Exception:
            return []

    async def score_rollout(
        self, prompt: Messages, completion: Messages, answer: str, state: State, task: str, info: Info
    ):
        """Score one rollout with the rubric (an exception, or a NaN/inf reward, scores 0 and is
        logged once)."""
        try:
            score = await self.rubric.score_rollout(prompt, completion, answer, state, task=task, info=info)
        except Exception as err:
            warn_once(
                self.logger,
                f"{type(self).__name__}.score:{type(err).__name__}",
                "scoring failed (%s); the rollout scores 0",
                format_error(err),
            )
            return RolloutScore(reward=0.0, metrics={})
        try:
            reward = float(score.reward)
        except (TypeError, ValueError):
            reward = math.nan
        if not math.isfinite(reward):
            warn_once(
                self.logger,
                f"{type(self).__name__}.score:nonfinite",
                "the rubric returned a reward of %r; the rollout scores 0 (logged once; counted in "
                "state['reward_errors'], metric errors/nonfinite_reward)",
                score.reward,
            )
            if isinstance(state, dict):
                state.setdefault("reward_errors", {})["reward"] = REWARD_NONFINITE
            return RolloutScore(reward=0.0, metrics=dict(score.metrics))
        return score

    # -- many rollouts -------------------------------------------------------------
    def _inputs_to_rows(self, inputs: Any) -> list[dict]:
        """Rows of ``prompt/answer/task/info`` (see ``dataset_format.inputs_to_rows``)."""
        return inputs_to_rows(inputs, self.format_dataset, self.format_prompt)

    async def a_generate(
        self,
        inputs: Any,
        client: Any,
        model: str,
        sampling_args: SamplingArgs | None = None,
        score_rollouts: bool = True,
        max_concurrent: int = -1,
        on_progress: ProgressCallback | None = None,
        **kwargs: Any,
    ) -> GenerateOutputs:
        """Run one rollout per input row concurrently and score each as soon as it finishes.

        ``inputs``: a ``datasets.Dataset`` or a dict of lists (``prompt``, and
        optionally ``answer``, ``task``, ``info``). At most ``max_concurrent``
        rollouts run at once (-1: no limit); scoring happens outside that limit
        so a slow reward function does not hold a generation slot.
        ``on_progress(done, total)`` is called after each rollout is scored.
        Extra ``kwargs`` go to ``rollout``. Results keep the input order.
        """
        rows = self._inputs_to_rows(inputs)
        total = len(rows)
        args = {**self.sampling_args, **(sampling_args or {})}
        limit = asyncio.Semaphore(max_concurrent) if max_concurrent and max_concurrent > 0 else None
        names = self.metric_names()
        results: list[tuple[Messages, State, RolloutScore] | None] = [None] * total
        done = 0

        async def run_one(i: int) -> None:
            nonlocal done
            row = rows[i]
            async with limit if limit is not None else contextlib.nullcontext():
                start = time.perf_counter()
                completion, state = await self._safe_rollout(client, model, row, args, **kwargs)
                generated = time.perf_counter()
            timing = state.setdefault("timing", {})
            timing["generation_ms"] = (generated - start) * 1000
            if state["failure"] is not None:
                # A failed rollout is not scored: reward 0 (contract), every metric 0.
                score = RolloutScore(reward=0.0, metrics={name: 0.0 for name in names})
            elif score_rollouts:
                score = await self.score_rollout(
                    state["prompt"], completion, state["answer"], state, state["task"], state["info"]
                )
            else:
                score = RolloutScore(reward=0.0, metrics={})
            end = time.perf_counter()
            timing["scoring_ms"] = (end - generated) * 1000
            timing["total_ms"] = (end - start) * 1000
            results[i] = (completion, state, score)
            done += 1
            if on_progress is not None:
                on_progress(done, total)

        await asyncio.gather(*(run_one(i) for i in range(total)))
        outputs = collect_outputs(results, names)
        raise_if_unreachable(outputs.state, client)
        return outputs

    generate = blocking(
        a_generate,
        "Blocking :meth:`a_generate`; works from a script and inside a running event loop (Jupyter).",
    )

    def eval_inputs(self, num_examples: int = -1, rollouts_per_example: int = 1) -> Any:
        """The eval rows, each repeated ``rollouts_per_example`` times in a row (ex0, ex0, ex1, ex1, ...)."""
        if rollouts_per_example < 1:
            raise ConfigError(f"rollouts_per_example must be >= 1, got {rollouts_per_example}")
        dataset = self.get_eval_dataset(n=num_examples)
        if rollouts_per_example > 1:
            dataset = dataset.select([i for i in range(len(dataset)) for _ in range(rollouts_per_example)])
        return dataset

    async def a_evaluate(
        self,
        client: Any,
        model: str,
        sampling_args: SamplingArgs | None = None,
        num_examples: int = -1,
        rollouts_per_example: int = 1,
        max_concurrent: int = -1,
        **kwargs: Any,
    ) -> GenerateOutputs:
        """Roll out and score the first ``num_examples`` eval rows (all if -1), ``rollouts_per_example`` times each.

        Results are grouped by example: index ``i * rollouts_per_example + j``
        is rollout ``j`` of example ``i``.
        """
        inputs = self.eval_inputs(num_examples, rollouts_per_example)
        return await self.a_generate(
            inputs, client, model, sampling_args, max_concurrent=max_concurrent, **kwargs
        )

    evaluate = blocking(
        a_evaluate,
        "Blocking :meth:`a_evaluate`: roll out and score the first ``num_examples`` eval rows (all if -1), "
        "``rollouts_per_example`` times each, grouped by example (index ``i * rollouts_per_example + j`` "
        "is rollout ``j`` of example ``i``).",
    )

    # -- results -----------------------------------------------------------------
    def make_dataset(
        self,
        results: GenerateOutputs,
        push_to_hub: bool = False,
        hub_name: str | None = None,
        state_columns: list[str] | None = None,
    ) -> Any:
        """A ``datasets.Dataset`` of the results: prompt, completion, answer, task, info (JSON), reward, metrics."""
        return results_dataset(results, push_to_hub, hub_name, state_columns)

    def process_env_results(
        self,
        prompts: list[Messages],
        completions: list[Messages],
        states: list[State],
        rewards: list[float],
        processing_class: Any,
        *args: Any,
        **kwargs: Any,
    ) -> ProcessedOutputs:
        """Token-level training data from the server's own tokens: ``rollout.tokens.process_rollouts``
        of ``states`` and ``rewards``, with its options (``max_seq_len``, ``mask_env_responses``,
        ``mask_truncated_completions``, ``zero_truncated_completions``) passed on as given."""
        from verifiers.rollout.tokens import process_rollouts

        return process_rollouts(states, rewards, processing_class, *args, **kwargs)
