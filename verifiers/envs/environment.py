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
import dis
import functools
import json
import logging
import math
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from verifiers.envs.dataset_format import build_prompt, format_dataset, inputs_to_rows
from verifiers.envs.decorators import HOOK_KINDS, find_hooks
from verifiers.envs.model_client import call_model
from verifiers.envs.results import ERROR_METRIC, collect_outputs, raise_if_unreachable, results_dataset
from verifiers.envs.state import new_state
from verifiers.errors import ConfigError, ServerError
from verifiers.failures import (
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
    RolloutInput,
    RolloutScore,
    SamplingArgs,
    State,
    Tool,
    as_message,
    tool_defs_to_oai,
)
from verifiers.utils.async_utils import DaemonThreadPool, resolve, run_sync
from verifiers.utils.logging import warn_once

ProgressCallback = Callable[[int, int], Any]
__all__ = [
    "ERROR_METRIC",
    "Environment",
    "ProgressCallback",
    "awaitable_or_blocking",
    "blocking",
]
T = TypeVar("T")

# The hook types of 0.1.8+ (``@vf.stop``, ``@vf.cleanup``, ``@vf.teardown`` methods), for annotations.
StopCondition = Callable[[State], Awaitable[bool]]
RolloutCleanup = Callable[[State], Awaitable[None]]
EnvironmentTeardown = Callable[[], Awaitable[None]]


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


# What the caller's next instruction does with a call's value when the caller means "the
# results" (0.1.4): stores it, reads an attribute or item of it, drops or returns it.
_RESULT_USES = ("STORE_", "LOAD_ATTR", "LOAD_METHOD", "BINARY_SUBSCR", "POP_TOP", "RETURN_")


def _awaited_by_caller(frame: Any) -> bool:
    """True when the code of ``frame`` will await the value of the call it is making.

    Read from the caller's bytecode (CPython 3.10-3.13): the instruction after the call is
    ``GET_AWAITABLE`` (``await f(...)``), or the value goes on to another call or a container
    (``asyncio.gather(f(...), g(...))``, ``[f(x) for x in ...]``). Stored, read (``.reward``),
    dropped or returned, it is meant as the results (0.1.4's blocking call).
    """
    code, at = frame.f_code, frame.f_lasti
    instructions = list(dis.get_instructions(code))
    # f_lasti may point into the call's inline caches (3.11+): the call is the last
    # instruction starting at or before it.
    for ins, nxt in zip(instructions, instructions[1:], strict=False):
        if ins.offset <= at < nxt.offset:
            return nxt.opname == "GET_AWAITABLE" or not nxt.opname.startswith(_RESULT_USES)
    return False


def awaitable_or_blocking(async_method: Callable[..., Awaitable[T]], doc: str) -> Callable[..., Any]:
    """``generate`` / ``evaluate`` for scripts of both eras (0.1.4: blocking; 0.1.6+: coroutines).

    Inside a running event loop, a call whose value the caller awaits (``await env.evaluate(...)``,
    ``asyncio.gather(env.evaluate(...), ...)``: see ``_awaited_by_caller``) gets the coroutine
    itself, so the rollouts run in the caller's loop, concurrently with its other tasks, as
    upstream's. Any other call (0.1.4's ``results = env.evaluate(...)``, from a script or in
    Jupyter) blocks until done and returns the results, which are also a finished awaitable
    (``GenerateOutputs`` is), so ``asyncio.run(env.evaluate(...))`` works too.
    """
    name = async_method.__name__

    @functools.wraps(async_method)
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        coro = getattr(self, name)(*args, **kwargs)
        try:
            asyncio.get_running_loop()
            awaited = _awaited_by_caller(sys._getframe(1))
        except RuntimeError:
            awaited = False
        return coro if awaited else run_sync(coro)

    method.__name__ = name.removeprefix("a_")
    method.__qualname__ = method.__qualname__.rsplit(".", 1)[0] + "." + method.__name__
    method.__doc__ = doc
    return method


def _is_builder(dataset: Any) -> bool:
    """True for a dataset given as a zero-argument builder (a function, not a Dataset or dict)."""
    return callable(dataset) and not isinstance(dataset, (dict, list, str))


def _callable_name(func: Any) -> str:
    return getattr(func, "__qualname__", None) or repr(func)


def _register_teardown_at_exit(env: Environment) -> None:
    """Run ``env``'s teardown at interpreter exit, without keeping ``env`` alive until then."""
    import atexit
    import weakref

    ref = weakref.ref(env)

    def at_exit() -> None:
        live = ref()
        if live is not None and not live._torn_down:
            try:
                run_sync(live._teardown())
            except Exception as err:  # exit must not fail because of a teardown
                logging.getLogger("verifiers.envs").warning("teardown at exit failed: %s", format_error(err))

    atexit.register(at_exit)


# Upstream methods this package has no counterpart for: an override would never be called.
_UNRUN_OVERRIDES = {
    "run_rollout": "0.1.8's per-rollout wrapper; override rollout() or setup_state() instead",
    "run_group": "0.1.8's per-group wrapper; score groups with group reward functions "
    "(plural parameters) or Rubric.score_group instead",
}


def _refuse_unrun_overrides(cls: type) -> None:
    """Refuse a class that defines a method this package would never call (see ``_UNRUN_OVERRIDES``)."""
    for name, instead in _UNRUN_OVERRIDES.items():
        owner = next((c for c in cls.__mro__ if name in c.__dict__), None)
        if owner is not None and not owner.__module__.startswith("verifiers."):
            raise ConfigError(
                f"{owner.__name__}.{name}() would never be called: this package's rollout loop has no {name}",
                hint=f"remove the override ({instead})",
            )


class _ToolDefsView(list):
    """``env.tool_defs`` as a list whose changes are written back to ``env.oai_tools``."""

    def __init__(self, env: Any, items: list[Tool]):
        super().__init__(items)
        self._env = env

    def _sync(self) -> None:
        self._env.oai_tools = tool_defs_to_oai(list(self))

    def _wrap(name: str) -> Any:  # noqa: N805 (builds the methods below)
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = getattr(list, name)(self, *args, **kwargs)
            self._sync()
            return self if name == "__iadd__" else out

        method.__name__ = name
        return method

    for _name in (
        "append",
        "extend",
        "insert",
        "remove",
        "pop",
        "clear",
        "sort",
        "reverse",
        "__setitem__",
        "__delitem__",
        "__iadd__",
    ):
        locals()[_name] = _wrap(_name)
    del _name, _wrap


class Environment(ABC):
    """Base class of every environment (see the 0.1.x API in the docs)."""

    def __getattr__(self, name: str) -> Any:
        # Reached only when the normal lookup fails: a 0.1.x member that is not offered here is
        # refused in one line saying why (verifiers.compat.refused.REFUSED_MEMBERS).
        from verifiers.compat.refused import refuse_member

        refuse_member(self, name)

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
        tool_defs: list[Any] | None = None,
        **kwargs: Any,
    ):
        self.logger = logging.getLogger(f"verifiers.envs.{type(self).__name__}")
        _refuse_unrun_overrides(type(self))
        if tool_defs is not None:
            # 0.1.12's provider-agnostic tools; the server is sent their OpenAI form.
            if oai_tools is not None:
                raise ConfigError(
                    "both oai_tools= and tool_defs= were given",
                    hint="pass one of them (tool_defs= is 0.1.12's name)",
                )
            oai_tools = tool_defs_to_oai(tool_defs)
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
        self._executor: concurrent.futures.Executor | None = None
        # 0.1.x behaviour: any extra keyword becomes an attribute (env-specific settings).
        for key, value in kwargs.items():
            setattr(self, key, value)
        if dataset is None and eval_dataset is None:
            raise ConfigError(
                f"{type(self).__name__} needs a dataset",
                hint="pass dataset= and/or eval_dataset= (a datasets.Dataset with a 'question' or 'prompt' column)",
            )
        # A dataset given as a builder (0.1.8+: ``dataset=lambda: load_dataset(...)``) is
        # built and formatted on first use (``env.dataset``, ``get_dataset()``), so loading
        # an environment stays cheap; a Dataset is formatted now, as in 0.1.4.
        self._dataset_source = dataset if _is_builder(dataset) else None
        self._eval_dataset_source = eval_dataset if _is_builder(eval_dataset) else None
        # Called as 0.1.4 called it, so an override with 0.1.4's signature keeps working.
        self._dataset = (
            self.format_dataset(dataset, self.system_prompt, self.few_shot)
            if dataset is not None and self._dataset_source is None
            else None
        )
        self._eval_dataset = (
            self.format_dataset(eval_dataset, self.system_prompt, self.few_shot)
            if eval_dataset is not None and self._eval_dataset_source is None
            else None
        )
        # Modules in the 0.1.8+ form (a dataset builder, or @vf.stop/@vf.cleanup/@vf.teardown
        # methods) get that release's extras, such as monitor metrics; 0.1.4-form modules keep
        # exactly 0.1.4's metrics.
        self.later_api = (
            self._dataset_source is not None
            or self._eval_dataset_source is not None
            or any(find_hooks(self, kind) for kind in HOOK_KINDS)
        )
        self._torn_down = False
        self.env_id: str | None = None  # set by vf.load_environment (0.1.6+), with the arguments it was given
        self.env_args: dict[str, Any] = {}
        if find_hooks(self, "teardown"):
            _register_teardown_at_exit(self)

    # -- datasets ------------------------------------------------------------
    @property
    def dataset(self) -> Any:
        """The formatted training split (built from its builder on first access), or None."""
        if self._dataset is None and self._dataset_source is not None:
            self._dataset = self._build(self._dataset_source, "dataset")
            self._dataset_source = None
        return self._dataset

    @dataset.setter
    def dataset(self, value: Any) -> None:
        self._dataset, self._dataset_source = value, None

    @property
    def eval_dataset(self) -> Any:
        """The formatted eval split (built from its builder on first access), or None."""
        if self._eval_dataset is None and self._eval_dataset_source is not None:
            self._eval_dataset = self._build(self._eval_dataset_source, "eval_dataset")
            self._eval_dataset_source = None
        return self._eval_dataset

    @eval_dataset.setter
    def eval_dataset(self, value: Any) -> None:
        self._eval_dataset, self._eval_dataset_source = value, None

    def build_dataset(self) -> Any:
        """Build (once) and return the training split (0.1.8+ name); None without one."""
        return self.dataset

    def build_eval_dataset(self) -> Any:
        """Build (once) and return the eval split (0.1.8+ name); None without one."""
        return self.eval_dataset

    def _build(self, builder: Callable[[], Any], which: str) -> Any:
        built = builder()
        if built is None:
            raise ConfigError(
                f"{type(self).__name__}'s {which} builder {_callable_name(builder)} returned None",
                hint="the builder must return a datasets.Dataset",
            )
        return self.format_dataset(built, self.system_prompt, self.few_shot)

    def add_rubric(self, rubric: Any) -> None:
        """Score with ``rubric`` too (0.1.8+): the env's rubric becomes a ``RubricGroup`` of both."""
        from verifiers.rubrics.group import RubricGroup

        if self.rubric is None:
            self.rubric = rubric
        elif isinstance(self.rubric, RubricGroup):
            self.rubric.rubrics.append(rubric)
        else:
            self.rubric = RubricGroup([self.rubric, rubric])

    # -- lifecycle hooks (0.1.8+: @vf.cleanup, @vf.teardown) ----------------------
    async def _cleanup(self, state: State) -> None:
        """Run the ``@vf.cleanup`` methods for one finished rollout, once (later calls do nothing).

        A cleanup that raises is logged once and does not stop the others or fail the rollout.
        """
        if not isinstance(state, dict) or state.get("_cleaned_up"):
            return
        state["_cleaned_up"] = True
        for handler in find_hooks(self, "cleanup"):
            try:
                await resolve(handler(state))
            except Exception as err:
                warn_once(
                    self.logger,
                    f"{type(self).__name__}.cleanup:{handler.__name__}",
                    "cleanup %s failed: %s",
                    handler.__name__,
                    format_error(err),
                )

    async def _teardown(self) -> None:
        """Run the ``@vf.teardown`` methods (and the rubric's ``teardown``, if any), once.

        Called at interpreter exit for an environment that has teardown methods;
        call it (or :meth:`teardown_sync`) yourself to release resources earlier.
        """
        if self._torn_down:
            return
        self._torn_down = True
        rubric_teardown = getattr(self.rubric, "teardown", None)
        handlers = ([rubric_teardown] if callable(rubric_teardown) else []) + find_hooks(self, "teardown")
        for handler in handlers:
            try:
                await resolve(handler())
            except Exception as err:
                self.logger.warning(
                    "teardown %s failed: %s", getattr(handler, "__name__", handler), format_error(err)
                )

    def get_reward_funcs(self) -> list[Any]:
        """The rubric's reward functions (0.1.4-0.1.7's name)."""
        return self.rubric.get_reward_funcs()

    def get_reward_weights(self) -> list[float]:
        """The rubric's weights (0.1.4-0.1.7's name)."""
        return self.rubric.get_reward_weights()

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        """Prepare per-rollout state before the first model call (0.1.8+'s base hook; overridable)."""
        return state

    def teardown_sync(self) -> None:
        """Blocking :meth:`_teardown` (works inside a running event loop too)."""
        run_sync(self._teardown())

    def format_dataset(
        self,
        dataset: Any,
        system_prompt: str | None = None,
        few_shot: list[ChatMessage] | None = None,
        question_key: str = "question",
        answer_key: str = "answer",
    ) -> Any:
        """``dataset`` with the standard columns (see ``dataset_format.format_dataset``); 0.1.4's signature.

        Prompts are built from ``question_key`` with the given ``system_prompt``
        and ``few_shot`` (the constructor passes the env's own); with
        ``answer_key`` other than ``"answer"`` that column becomes ``answer``.
        Override to customise.
        """
        return format_dataset(
            dataset,
            system_prompt,
            few_shot,
            self.message_type,
            question_key=question_key,
            answer_key=answer_key,
        )

    def format_prompt(
        self,
        prompt_str: str,
        system_prompt: str | None = None,
        few_shot: list[ChatMessage] | None = None,
    ) -> list[ChatMessage]:
        """Chat messages for one question: ``[system?] + few_shot + [user: prompt_str]`` (0.1.4).

        Only the ``system_prompt`` and ``few_shot`` given are used, not the env's.
        """
        return build_prompt(prompt_str, system_prompt, few_shot, "chat")  # type: ignore[return-value]

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
    def _get_executor(self) -> concurrent.futures.Executor:
        """Threads for sync clients and sync tools (``max_workers`` of them), created on first use."""
        if self._executor is None:
            # Daemon threads: a sync tool that never returns must not keep the process from exiting.
            self._executor = DaemonThreadPool(
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
        """The OpenAI tool schemas for one example. ``info["tool_defs"]`` (0.1.12: ``vf.Tool``
        records, a list or its JSON) replaces the env's when given, an empty list meaning no
        tools, as 0.1.12 reads it (None, what a dataset column holds for rows without the key,
        is not given: 0.1.12 would send no tools); else a non-empty ``info["oai_tools"]`` (0.1.4-0.1.10)
        does; else the env's own."""
        if info and info.get("tool_defs") is not None:
            return tool_defs_to_oai(info["tool_defs"], where="info['tool_defs']") or None
        tools = info.get("oai_tools") if info else None
        if isinstance(tools, str):
            tools = json.loads(tools)
        return tools if tools else self.oai_tools

    @property
    def tool_defs(self) -> list[Tool] | None:
        """The env's tools as 0.1.12's ``vf.Tool`` records (None without tools), built from
        ``oai_tools``, the list the server is sent. A live list: ``append``/``remove``/... and
        assignment change ``oai_tools`` too, so upstream code that edits ``self.tool_defs`` is
        never ignored."""
        if self.__dict__.get("oai_tools") is None:
            return None
        return _ToolDefsView(self, [Tool.from_oai(t) for t in self.oai_tools])

    @tool_defs.setter
    def tool_defs(self, defs: list[Any] | None) -> None:
        self.oai_tools = tool_defs_to_oai(defs)

    # -- one rollout -------------------------------------------------------------
    async def init_state(
        self,
        input: RolloutInput | dict,
        client: Any = None,
        model: str = "",
        sampling_args: SamplingArgs | None = None,
    ) -> State:
        """A fresh rollout state for one input row (0.1.8+'s name and arguments).

        ``input``: ``prompt`` and optionally ``answer``, ``task``, ``info`` (a dict or
        its JSON), ``example_id``. The state has every key of the contract in
        docs/architecture.md, plus ``input`` (the row, with ``info`` parsed), ``client``,
        ``model`` and ``sampling_args``, as upstream's.
        """
        from verifiers.envs.dataset_format import clean_prompt, parse_info

        row = dict(input)
        if "prompt" not in row or row["prompt"] is None:
            raise ConfigError("a rollout input needs a 'prompt'", hint="pass {'prompt': [...], ...}")
        info = parse_info(row.get("info"))
        task = row.get("task") or "default"
        answer = row.get("answer")
        prompt = clean_prompt(row["prompt"])
        if isinstance(prompt, list):  # readable as m.role / m.content too, as upstream 0.1.12's
            prompt = [as_message(m) for m in prompt]
        state = new_state(prompt, "" if answer is None else answer, task, info)
        state["input"] = {**row, "info": info, "task": task}
        if "example_id" in row:
            state["example_id"] = row["example_id"]
        state["client"] = client
        state["model"] = model
        state["sampling_args"] = sampling_args
        state["is_completed"] = False
        return state

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
    async def run_rollouts(
        self,
        client: Any,
        model: str,
        prompts: list[Messages],
        answers: list[str],
        tasks: list[str],
        infos: list[Info],
        sampling_args: SamplingArgs | None = None,
        max_concurrent: int = -1,
        **kwargs: Any,
    ) -> list[tuple[Messages, State]]:
        """Run one rollout per prompt concurrently (at most ``max_concurrent`` at once, -1: no limit)
        and return their ``(completion, state)`` in order, unscored (0.1.4's signature).

        ``sampling_args`` are used as given (``a_generate`` merges them with the
        env's). A rollout that raises is a failed-rollout value, as in ``a_generate``.
        """
        limit = asyncio.Semaphore(max_concurrent) if max_concurrent and max_concurrent > 0 else None
        args = dict(sampling_args or {})

        async def one(prompt: Messages, answer: str, task: str, info: Info) -> tuple[Messages, State]:
            row = {"prompt": prompt, "answer": answer, "task": task, "info": info if info is not None else {}}
            async with limit if limit is not None else contextlib.nullcontext():
                return await self._safe_rollout(client, model, row, args, **kwargs)

        return list(
            await asyncio.gather(*(one(*row) for row in zip(prompts, answers, tasks, infos, strict=True)))
        )

    def _inputs_to_rows(self, inputs: Any) -> list[dict]:
        """Rows of ``prompt/answer/task/info`` (see ``dataset_format.inputs_to_rows``)."""
        return inputs_to_rows(
            inputs,
            lambda dataset, name: self.format_dataset(dataset, self.system_prompt, self.few_shot),
            lambda question: build_prompt(question, self.system_prompt, self.few_shot, self.message_type),
        )

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
            elif score_rollouts and by_group:
                score = None  # scored with the rest of its group once all rollouts are done
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
            if score is None:
                return
            done += 1
            if on_progress is not None:
                on_progress(done, total)

        # A rubric with group reward functions (0.1.8+) scores the rollouts of one example
        # together, after they have all finished; otherwise each is scored as soon as it ends.
        has_group_funcs = getattr(self.rubric, "has_group_funcs", None)
        by_group = bool(score_rollouts and callable(has_group_funcs) and has_group_funcs())
        await asyncio.gather(*(run_one(i) for i in range(total)))
        if by_group:
            for members in await self._score_groups(rows, results):
                done += len(members)
                if on_progress is not None:
                    on_progress(done, total)
        outputs = collect_outputs(results, names)
        raise_if_unreachable(outputs.state, client)
        return outputs

    async def _score_groups(self, rows: list[dict], results: list) -> list[list[int]]:
        """Score the results left unscored (``score`` None) with ``rubric.score_group``, one run of
        rows of the same example at a time; returns the groups scored, in order.

        A failed rollout stays out of its group (it keeps reward 0). A group whose scoring
        raises scores 0 (logged once), as a single rollout's would.
        """
        from verifiers.rubrics.rubric import consecutive_groups

        keys = [(r["prompt"], r.get("answer", ""), None, None, r.get("task"), r.get("info")) for r in rows]
        groups = [[i for i in g if results[i][2] is None] for g in consecutive_groups(keys)]
        groups = [g for g in groups if g]

        async def one(members: list[int]) -> None:
            states = [results[i][1] for i in members]
            start = time.perf_counter()
            try:
                scores = await self.rubric.score_group(states)
                part = [
                    RolloutScore(
                        reward=scores.reward[k], metrics={n: v[k] for n, v in scores.metrics.items()}
                    )
                    for k in range(len(members))
                ]
            except Exception as err:
                warn_once(
                    self.logger,
                    f"{type(self).__name__}.score_group:{type(err).__name__}",
                    "group scoring failed (%s); the group scores 0",
                    format_error(err),
                )
                part = [RolloutScore(reward=0.0, metrics={}) for _ in members]
            elapsed = (time.perf_counter() - start) * 1000
            for i, score in zip(members, part, strict=True):
                completion, state, _ = results[i]
                timing = state.setdefault("timing", {})
                timing["scoring_ms"] = elapsed
                timing["total_ms"] = timing.get("generation_ms", 0.0) + elapsed
                results[i] = (completion, state, score)

        await asyncio.gather(*(one(g) for g in groups))
        return groups

    generate = awaitable_or_blocking(
        a_generate,
        ":meth:`a_generate`: ``await env.generate(...)`` runs it in the caller's loop (0.1.6+); any other "
        "call blocks and returns the results (0.1.4), which can also be awaited (see awaitable_or_blocking).",
    )
    generate_sync = blocking(
        a_generate,
        "Blocking :meth:`a_generate` (0.1.6+'s name); works from a script and inside a running event loop.",
    )
    generate_sync.__name__ = "generate_sync"

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

    evaluate = awaitable_or_blocking(
        a_evaluate,
        ":meth:`a_evaluate`: ``await env.evaluate(...)`` runs it in the caller's loop (0.1.6+); any other "
        "call blocks and returns the results (0.1.4), which can also be awaited (see awaitable_or_blocking). Roll out and score the first ``num_examples`` eval rows (all if -1), "
        "``rollouts_per_example`` times each, grouped by example (index ``i * rollouts_per_example + j`` "
        "is rollout ``j`` of example ``i``).",
    )
    evaluate_sync = blocking(
        a_evaluate,
        "Blocking :meth:`a_evaluate` (0.1.6+'s name); works from a script and inside a running event loop.",
    )
    evaluate_sync.__name__ = "evaluate_sync"

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

    def process_env_results_vllm(
        self,
        prompts: list[Messages],
        completions: list[Messages],
        states: list[State],
        rewards: list[float],
        processing_class: Any,
        max_seq_len: int = -1,
        mask_env_responses: bool = False,
        mask_truncated_completions: bool = False,
        zero_truncated_completions: bool = False,
    ) -> ProcessedOutputs:
        """Token-level training data from the server's own tokens (0.1.4's signature):
        ``tokenization.assembly.process_rollouts`` of ``states`` and ``rewards``.

        A state from a 0.1.4-style rollout (vLLM responses with token ids in
        ``state["responses"]``, no ``state["turn_tokens"]``) is assembled from
        its responses and ``prompts[i]`` / ``completions[i]`` as 0.1.4 did
        (``tokenization.assembly.turns_from_responses``). Truncation: a sample longer
        than ``max_seq_len`` keeps its prompt and the first tokens of its
        completion; ``mask_truncated_completions`` zeroes a truncated sample's
        loss mask, ``zero_truncated_completions`` its reward.
        """
        from verifiers.tokenization import assembly as tokens

        prepared = []
        for prompt, completion, state in zip(prompts, completions, states, strict=False):
            has_turns = any(tokens.as_turn_tokens(t).prompt_ids for t in (state.get("turn_tokens") or []))
            if not has_turns and state.get("responses"):
                turns = tokens.turns_from_responses(prompt, completion, state, processing_class)
                if turns is not None:
                    state = {**state, "turn_tokens": turns}
            prepared.append(state)
        prepared += list(states[len(prepared) :])  # states without prompts (callers of 0.2 passed [])
        return tokens.process_rollouts(
            prepared,
            rewards,
            processing_class,
            max_seq_len=max_seq_len,
            mask_env_responses=mask_env_responses,
            mask_truncated_completions=mask_truncated_completions,
            zero_truncated_completions=zero_truncated_completions,
        )

    def process_env_results(
        self,
        prompts: list[Messages],
        completions: list[Messages],
        states: list[State],
        rewards: list[float],
        processing_class: Any,
        max_seq_len: int = -1,
        mask_env_responses: bool = False,
        mask_truncated_completions: bool = False,
        zero_truncated_completions: bool = False,
    ) -> ProcessedOutputs:
        """The same as :meth:`process_env_results_vllm` (0.1.4's alias); the trainer calls this name,
        so an override of either is used."""
        method = type(self).process_env_results_vllm
        return method(
            self,
            prompts,
            completions,
            states,
            rewards,
            processing_class,
            max_seq_len=max_seq_len,
            mask_env_responses=mask_env_responses,
            mask_truncated_completions=mask_truncated_completions,
            zero_truncated_completions=zero_truncated_completions,
        )

    # -- 0.1.4's helpers for vLLM responses ----------------------------------------
    @staticmethod
    def _response_tokens(response: Any, api: str) -> list[int]:
        from verifiers.tokenization.assembly import response_token_ids

        ids = response_token_ids(response)
        if ids is None:
            raise ConfigError(
                f"the {api} response has no token ids in its logprobs",
                hint="request logprobs=True with extra_body return_tokens_as_token_ids=True (vf-vllm / vLLM)",
            )
        return ids

    def parse_chat_completion_tokens(self, chat_completion: Any) -> list[int]:
        """The sampled token ids of a vLLM chat completion (its ``token_id:N`` logprob tokens)."""
        return self._response_tokens(chat_completion, "chat completion")

    def parse_chat_completion_logprobs(self, chat_completion: Any) -> list[float]:
        """The sampling log-probs of a vLLM chat completion, one per token."""
        from verifiers.tokenization.assembly import response_logprobs

        self._response_tokens(chat_completion, "chat completion")
        return response_logprobs(chat_completion)

    def parse_completion_tokens(self, completion: Any) -> list[int]:
        """The sampled token ids of a vLLM text completion."""
        return self._response_tokens(completion, "completion")

    def parse_completion_logprobs(self, completion: Any) -> list[float]:
        """The sampling log-probs of a vLLM text completion, one per token."""
        from verifiers.tokenization.assembly import response_logprobs

        self._response_tokens(completion, "completion")
        return response_logprobs(completion)
