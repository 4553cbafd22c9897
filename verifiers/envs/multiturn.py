"""``MultiTurnEnv``: alternate model turns and environment turns until done.

Loop per rollout: model call -> ``is_completed``? -> ``env_response`` -> model
call ... It stops when ``is_completed`` says so, after ``max_turns`` model
calls, when a turn is cut at ``max_tokens`` (``finish_reason == "length"``:
``state["is_truncated"] = True``), when the completion so far (every turn and
environment reply) reaches the sampling argument ``max_completion_length`` (the
trainer's cap on a whole rollout's completion; never sent to the server; also
truncated, and each turn asks for at most what is left), or when the prompt
outgrows the model's context window (also truncated). A hook or model call that raises ends the
rollout with ``state["failure"]`` set (a ``RolloutFailure`` whose kind names
the hook, see failures.py); it is logged once per env class and never
stops the other rollouts.
"""

from __future__ import annotations

import inspect
import json
import time
from abc import abstractmethod
from typing import Any

from verifiers.compat.forms import also_takes
from verifiers.envs.dataset_format import clean_prompt
from verifiers.envs.decorators import find_hooks
from verifiers.envs.environment import Environment
from verifiers.envs.model_client import extract_turn_tokens, response_message
from verifiers.errors import PromptTooLongError
from verifiers.failures import FailureKind, format_error, model_call_kind, record_failure
from verifiers.rubrics.rubric import Rubric
from verifiers.types import (
    ChatMessage,
    Info,
    Messages,
    SamplingArgs,
    State,
    Tool,
    as_message,
    tool_defs_to_oai,
)
from verifiers.utils.async_utils import resolve
from verifiers.utils.logging import warn_once

# How the once-per-kind log line names where the rollout failed.
_WHERE_LOGGED = {
    FailureKind.BAD_RESPONSE: "reading the response",
    FailureKind.SERVER_UNREACHABLE: "the model call",
    FailureKind.SERVER_TIMEOUT: "the model call",
    FailureKind.SERVER_ERROR: "the model call",
    FailureKind.MODEL_CALL: "the model call",
}


class MultiTurnMonitorRubric(Rubric):
    """Monitor metrics of a multi-turn rollout (weight 0, not rewarded): ``num_turns``."""

    def __init__(self, **kwargs: Any):
        super().__init__(**kwargs)
        self.add_metric(self.num_turns)

    def num_turns(self, state: State) -> float:
        """Model calls in the rollout (steps of ``state["trajectory"]``)."""
        return float(len(state.get("trajectory") or state.get("turn_tokens") or []))


def _state_only(args: tuple, kwargs: dict) -> bool:
    """An ``is_completed`` call in 0.1.8+'s form, ``(state)``, not 0.1.4's ``(messages, state)``
    (messages are a string or a list; a state is a dict)."""
    if args:
        return len(args) == 1 and isinstance(args[0], dict) and "state" not in kwargs
    return "state" in kwargs and "messages" not in kwargs


def completed_from_state(method: Any) -> Any:
    """``method``, an ``is_completed(messages, state)``, also taking 0.1.8+'s ``is_completed(state)``
    (as in a subclass's ``await super().is_completed(state)``): the messages are then the
    conversation so far, the state's prompt and completion."""

    async def from_state(self: Any, state: State, **kwargs: Any) -> bool:
        messages = _concat(clean_prompt(state.get("prompt") or []), state.get("completion") or [])
        return bool(await resolve(method(self, messages, state, **kwargs)))

    return also_takes(from_state, when=lambda *a, **k: _state_only(a, k))(method)


def _written_for_state(method: Any) -> bool:
    """Whether an ``is_completed`` override is written in 0.1.8+'s form, ``(self, state, ...)``."""
    try:
        params = [p for p in inspect.signature(method).parameters.values() if p.name != "self"]
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0].name == "state"


class MultiTurnEnv(Environment):
    """Subclasses implement ``is_completed`` and ``env_response``; ``setup_state`` is optional.

    The base-class hooks are ``async`` (as in 0.1.x), so an override may
    ``await super().is_completed(...)``. An override itself may be sync or
    async: the rollout awaits whatever it returns when that is awaitable.
    """

    def __init__(self, max_turns: int = -1, **kwargs: Any):
        self.max_turns = max_turns
        super().__init__(**kwargs)
        if any(self._overrides(name) for name in _PROMPT_HOOKS) or _written_for_state(
            type(self).is_completed
        ):
            self.later_api = True  # these hooks are 0.1.8+ API: the module is in that form
        if self.later_api:
            # 0.1.8+ tracks the number of model turns of every rollout (weight 0).
            self.add_rubric(MultiTurnMonitorRubric(parser=self.parser))

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        """Prepare per-rollout state before the first model call (an override may be sync; may return None)."""
        return state

    def _overrides(self, name: str) -> bool:
        """True if the env's class replaces MultiTurnEnv's ``name``."""
        return getattr(type(self), name, None) is not getattr(MultiTurnEnv, name, None)

    async def get_prompt_messages(self, state: State) -> Messages:
        """The messages sent for the next model call (0.1.8+). An override makes the rollout's
        history its own (non-linear: e.g. a summary instead of the full history); the loop then
        sends exactly what it returns, and does not call ``env_response`` itself (this base
        version, for ``super()`` calls, does). The default: the prompt first, then the last
        step's prompt + completion + ``env_response`` to them."""
        steps = state["trajectory"]
        if not steps:
            return state["prompt"]
        messages = _concat(steps[-1]["prompt"], steps[-1]["completion"])
        result = await resolve(self.env_response(messages, state))
        env_messages, new_state = split_env_response(result)
        if new_state is not None and new_state is not state:
            state.update(new_state)  # 0.1.4's (messages, state) pair with a new dict
        return _concat(messages, env_messages)

    async def render_completion(self, state: State) -> None:
        """Set ``state["completion"]`` at the end of the rollout (0.1.10+). Called when the env
        overrides it or ``get_prompt_messages``; the default: the last step's prompt +
        completion (+ ``final_env_response``) after the rollout's prompt."""
        steps = state["trajectory"]
        if not steps:
            state["completion"] = [] if isinstance(state["prompt"], list) else ""
            return
        conversation = _concat(steps[-1]["prompt"], steps[-1]["completion"])
        if state.get("final_env_response"):
            conversation = _concat(conversation, state["final_env_response"])
        state["completion"] = conversation[len(state["prompt"]) :]

    async def add_trajectory_step(self, state: State, trajectory_step: dict[str, Any]) -> None:
        """Record one model call in ``state["trajectory"]`` (0.1.10+). An override may set the
        step's ``reward``/``advantage`` (scoring fills only steps that have none) or ``extras``."""
        state["trajectory"].append(trajectory_step)

    async def max_turns_reached(self, state: State) -> bool:
        """True once the rollout has had ``max_turns`` model turns (never when ``max_turns <= 0``)."""
        return self.max_turns > 0 and state["turn"] >= self.max_turns

    async def has_error(self, state: State) -> bool:
        """True once the rollout failed (0.1.9+'s stop condition; the loop already ends on it)."""
        return state.get("error") is not None or state.get("failure") is not None

    async def has_final_env_response(self, state: State) -> bool:
        """True once the environment set ``state["final_env_response"]`` (0.1.10+; the loop ends on it)."""
        return state.get("final_env_response") is not None

    async def prompt_too_long(self, state: State) -> bool:
        """True once the conversation no longer fits the model's context (0.1.5+'s check, which
        environments call from ``is_completed``); the rollout then ends, counted as truncated."""
        return bool(state.get("prompt_too_long", False))

    @completed_from_state
    async def is_completed(self, messages: Messages, state: State, **kwargs: Any) -> bool:
        """True when the rollout is done; called after every model turn (an override may be sync).

        The base version, for ``await super().is_completed(...)`` and for 0.1.8+
        subclasses that only declare ``@vf.stop`` methods, says whether
        ``max_turns`` is reached or any stop condition holds.
        """
        # Stop conditions first, so a condition that coincides with max_turns is the one named.
        return await self._stop_reached(state) or await self.max_turns_reached(state)

    async def _ask_is_completed(self, messages: Messages, state: State, kwargs: dict[str, Any]) -> bool:
        """Ask ``is_completed`` in the form the environment's class wrote it in: ``(state)`` (0.1.8+)
        or ``(messages, state)`` (0.1.4)."""
        if _written_for_state(type(self).is_completed):
            return bool(await resolve(self.is_completed(state, **kwargs)))
        return bool(await resolve(self.is_completed(messages, state, **kwargs)))

    async def _stop_reached(self, state: State) -> bool:
        """Check the ``@vf.stop`` methods in priority order; the first true one ends the rollout
        (its name goes to ``state["stop_condition"]``)."""
        for condition in find_hooks(self, "stop"):
            if await resolve(condition(state)):
                state["stop_condition"] = condition.__name__
                state["is_completed"] = True
                return True
        return False

    @abstractmethod
    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> tuple[Messages, State]:
        """The environment's reply to the last model turn: ``(new messages, state)`` (0.1.4), or just
        the new messages (0.1.8+, the state is changed in place); an override may be sync.

        Setting ``state["final_env_response"]`` (0.1.10+) ends the rollout with those messages
        appended instead of another model turn.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement env_response")

    def _fail(self, state: State, kind: FailureKind, err: BaseException) -> None:
        record_failure(state, kind, err)
        warn_once(
            self.logger,
            f"{type(self).__name__}.{kind.value}:{type(err).__name__}",
            "%s rollout ended by an error in %s: %s (later ones are counted in the metrics "
            "'rollout_errors' and 'errors/%s')",
            type(self).__name__,
            _WHERE_LOGGED.get(kind, kind.value),
            format_error(err),
            kind.value,
        )

    async def rollout(
        self,
        client: Any,
        model: Any,
        prompt: Any = None,
        answer: Any = "",
        task: str = "default",
        info: Info | None = None,
        sampling_args: SamplingArgs | None = None,
        **kwargs: Any,
    ) -> Any:
        """One episode. Two call forms:

        - 0.1.4: ``rollout(client, model, prompt, answer, task, info, sampling_args)`` returns
          ``(completion, state)``;
        - 0.1.8+: ``rollout(input, client, model, sampling_args)`` with a ``RolloutInput``
          (``prompt``, and optionally ``answer``, ``task``, ``info``, ``example_id``) returns
          the ``state`` (its ``completion`` holds the new messages).
        """
        if "input" in kwargs or (isinstance(client, dict) and "prompt" in client):
            if "input" in kwargs:  # all by keyword: input=, client=, model=, sampling_args=
                row = kwargs.pop("input")
            else:  # positional (input, client, model, sampling_args): shifted one place
                row, client, model = client, model, prompt
                if isinstance(answer, dict):
                    sampling_args = answer
            _, state = await self._run(client, model, dict(row), sampling_args, kwargs)
            return state
        row = {"prompt": prompt, "answer": answer, "task": task, "info": info}
        return await self._run(client, model, row, sampling_args, kwargs)

    async def _run(
        self, client: Any, model: str, row: dict, sampling_args: SamplingArgs | None, kwargs: dict[str, Any]
    ) -> tuple[Messages, State]:
        start = time.perf_counter()
        state = await self.init_state(row, client, model, sampling_args)
        # The ``@vf.cleanup`` methods run once the rollout ends, however it ends (cancellation too).
        try:
            completion, state = await self._turns(
                client, model, state["prompt"], state, sampling_args, kwargs
            )
        except BaseException:
            await self._cleanup(state)
            raise
        await self._cleanup(state)
        return self._finish(completion, state, start)

    async def _turns(
        self,
        client: Any,
        model: str,
        prompt: Messages,
        state: State,
        sampling_args: SamplingArgs | None,
        kwargs: dict[str, Any],
    ) -> tuple[Messages, State]:
        """The turn loop of :meth:`rollout`: ``(completion, final state)``."""
        chat = not isinstance(prompt, str)
        args = {**self.sampling_args, **(sampling_args or {})}
        budget = args.pop("max_completion_length", None)  # the whole completion's cap, not a server argument
        total_cap = args.pop(
            "max_total_tokens", None
        )  # vf-eval's cap on prompt + completion, not sent either
        per_turn = args.get("max_tokens")
        # Active tools (0.1.8+): this rollout's own list, which setup_state may change, as
        # state["oai_tools"] (0.1.5-0.1.10) or state["tool_defs"] (0.1.12); see _sync_tools.
        state["oai_tools"] = self.tools_for(state["info"]) if chat else None
        tools_seen = _sync_tools(state, None)
        # get_prompt_messages overridden (0.1.8+): it decides each call's messages itself.
        own_prompts = self._overrides("get_prompt_messages")
        # An is_completed override (0.1.4 style) is asked first; stop conditions are checked too.
        own_is_completed = type(self).is_completed is not MultiTurnEnv.is_completed
        # Working copy of the conversation; the state's prompt stays as given.
        messages: Messages = clean_prompt(prompt)
        if chat:
            messages = [as_message(m) for m in messages]
        completion: Messages = [] if chat else ""
        state["completion"] = completion

        def add(new: Messages | ChatMessage) -> None:
            nonlocal messages, completion
            if not chat:
                messages += new if isinstance(new, str) else "".join(str(m.get("content", "")) for m in new)
                completion += new if isinstance(new, str) else "".join(str(m.get("content", "")) for m in new)
                state["completion"] = completion
                return
            items = [as_message(m) for m in ([new] if isinstance(new, dict) else list(new or []))]
            messages.extend(items)
            completion.extend(items)

        try:
            state = (await resolve(self.setup_state(state, **kwargs))) or state
        except Exception as err:
            self._fail(state, FailureKind.SETUP_STATE, err)
            return completion, state
        try:
            # 0.1.8+ checks stop conditions before the first model call too.
            if await self._stop_reached(state):
                return completion, state
        except Exception as err:
            self._fail(state, FailureKind.IS_COMPLETED, err)
            return completion, state

        # 0.1.4 asked an is_completed override before every model call as well, so a game that
        # env_response finished ends there, with no extra model turn (0.1.8+ asks after each model
        # turn only, its env_response running inside the next turn). Not before the first call:
        # a rollout keeps at least one model turn to train on (docs/migrating.md).
        ask_before_each_call = own_is_completed and not self.later_api
        while True:
            if ask_before_each_call and state["turn"] > 0:  # not before the first: see docs/migrating.md
                try:
                    if await self._ask_is_completed(messages, state, kwargs):
                        if state.get("stop_condition") is None:
                            state["stop_condition"] = "is_completed"
                        break
                except Exception as err:
                    self._fail(state, FailureKind.IS_COMPLETED, err)
                    break
            if own_prompts:
                try:
                    prompt_messages = await resolve(self.get_prompt_messages(state))
                except Exception as err:
                    self._fail(state, FailureKind.ENV_RESPONSE, err)
                    break
                if state.get("final_env_response") is not None:
                    # 0.1.10+: the environment ended the rollout (render_completion adds the messages).
                    state["stop_condition"] = "has_final_env_response"
                    break
                messages = clean_prompt(prompt_messages)
                if chat:
                    messages = [as_message(m) for m in messages]
            if chat:
                tools_seen = _sync_tools(state, tools_seen)
            sent = list(messages) if chat else messages
            try:
                response = await self.get_model_response(
                    client,
                    model,
                    messages,
                    oai_tools=state.get("oai_tools") if chat else None,
                    sampling_args=args,
                    message_type=self.message_type,
                )
            except PromptTooLongError:
                # The history no longer fits: a length limit, not a failure.
                state["is_truncated"] = True
                state["prompt_too_long"] = True
                break
            except Exception as err:
                self._fail(state, model_call_kind(err), err)
                break
            state["responses"].append(response)
            try:
                tokens = extract_turn_tokens(response, self.message_type)
                reply = response_message(response, self.message_type)
            except Exception as err:
                self._fail(state, FailureKind.BAD_RESPONSE, err)
                break
            state["turn_tokens"].append(tokens)
            state["turn"] += 1
            add(reply)
            truncated = tokens.finish_reason == "length"
            step = trajectory_step(sent, reply, response, tokens, truncated, state)
            try:
                await resolve(self.add_trajectory_step(state, step))
            except Exception as err:
                self._fail(state, FailureKind.ENV_RESPONSE, err)
                break
            if truncated:
                state["is_truncated"] = True
                break
            if budget is not None:
                used = _completion_tokens(state["turn_tokens"])
                if used >= budget:
                    state["is_truncated"] = True
                    break
                args["max_tokens"] = min(per_turn or budget, budget - used)
            if total_cap is not None:
                # Upstream's max_seq_len: the last call's prompt + completion is the whole rollout.
                used_total = len(tokens.prompt_ids) + len(tokens.completion_ids)
                if not tokens.prompt_ids:  # no token ids from the server: its usage count
                    used_total = int(getattr(getattr(response, "usage", None), "total_tokens", 0) or 0)
                if used_total >= total_cap:
                    state["is_truncated"] = True
                    break
                # The next prompt holds everything so far, so its reply gets at most what is left.
                args["max_tokens"] = min(args.get("max_tokens") or total_cap, total_cap - used_total)
            try:
                if await self._ask_is_completed(messages, state, kwargs):
                    state.setdefault("stop_condition", None)
                    if state["stop_condition"] is None:
                        at_limit = self.max_turns > 0 and state["turn"] >= self.max_turns
                        state["stop_condition"] = "max_turns_reached" if at_limit else "is_completed"
                    break
                if own_is_completed and await self._stop_reached(state):
                    break
            except Exception as err:
                self._fail(state, FailureKind.IS_COMPLETED, err)
                break
            if self.max_turns > 0 and state["turn"] >= self.max_turns:
                state["stop_condition"] = "max_turns_reached"
                break
            if own_prompts:
                continue  # the next get_prompt_messages call builds the environment's reply
            try:
                result = await resolve(self.env_response(messages, state, **kwargs))
            except Exception as err:
                self._fail(state, FailureKind.ENV_RESPONSE, err)
                break
            env_messages, new_state_ = split_env_response(result)
            state = new_state_ if new_state_ is not None else state
            final = state.get("final_env_response")
            if final is not None:
                # 0.1.10+: the environment ends the rollout with these messages.
                add(final)
                state["stop_condition"] = "has_final_env_response"
                break
            add(env_messages)
        if own_prompts or self._overrides("render_completion"):
            try:
                await resolve(self.render_completion(state))
            except Exception as err:
                self._fail(state, FailureKind.ENV_RESPONSE, err)
            else:
                completion = state["completion"]
        return completion, state

    @staticmethod
    def _finish(completion: Messages, state: State, start: float) -> tuple[Messages, State]:
        state["completion"] = completion
        state.setdefault("timing", {})["generation_ms"] = (time.perf_counter() - start) * 1000
        return completion, state


# 0.1.8+ hooks of the turn loop that a module may override (see MultiTurnEnv).
_PROMPT_HOOKS = ("get_prompt_messages", "render_completion", "add_trajectory_step")


def _concat(first: Messages, second: Any) -> Messages:
    """``first`` followed by ``second`` (messages, one message, or text), as a new value."""
    if isinstance(first, str):
        if isinstance(second, str):
            return first + second
        return first + "".join(
            str(m.get("content", "")) for m in ([second] if isinstance(second, dict) else second or [])
        )
    items = (
        [second]
        if isinstance(second, dict)
        else ([{"role": "user", "content": second}] if isinstance(second, str) else list(second or []))
    )
    return [as_message(m) for m in list(first) + items]


def _tools_key(tools: Any) -> str:
    return json.dumps(tools, sort_keys=True, default=str)


def _sync_tools(state: State, seen: tuple[str, str] | None) -> tuple[str, str]:
    """Keep ``state["oai_tools"]`` (sent to the server) and ``state["tool_defs"]`` (0.1.12's
    ``vf.Tool`` records of the same tools) one list: whichever changed since ``seen`` (the keys
    of both at the last call; None at the start, when ``oai_tools`` is the source) wins, so a
    ``setup_state`` or hook that changes either changes what the model is offered.
    Returns the new ``seen``."""
    oai, defs = state.get("oai_tools"), state.get("tool_defs")
    if seen is None or _tools_key(oai) != seen[0]:
        state["tool_defs"] = [Tool.from_oai(t) for t in oai or []]
    elif _tools_key(defs) != seen[1]:
        state["oai_tools"] = tool_defs_to_oai(defs, where="state['tool_defs']") or None
    return _tools_key(state.get("oai_tools")), _tools_key(state.get("tool_defs"))


def split_env_response(result: Any) -> tuple[Messages, State | None]:
    """``(messages, state or None)`` from what ``env_response`` returned: 0.1.4's
    ``(messages, state)`` pair, or 0.1.8+'s messages alone (a list, one message, or text)."""
    if (
        isinstance(result, tuple)
        and len(result) == 2
        and (result[1] is None or (isinstance(result[1], dict) and "role" not in result[1]))
    ):
        return result[0], result[1]
    if isinstance(result, tuple):
        return list(result), None
    return result, None


def trajectory_step(
    prompt: Messages, reply: Any, response: Any, tokens: Any, truncated: bool, state: State
) -> dict[str, Any]:
    """One entry of ``state["trajectory"]`` (0.1.8+): the messages sent, the reply, and the
    server's tokens for this model call (``tokens`` None when the server sent no token ids)."""
    completion = [reply] if isinstance(reply, dict) else reply
    ids = list(getattr(tokens, "prompt_ids", None) or [])
    out = list(getattr(tokens, "completion_ids", None) or [])
    step_tokens = None
    if ids or out:
        step_tokens = {
            "prompt_ids": ids,
            "prompt_mask": [0] * len(ids),
            "completion_ids": out,
            "completion_mask": [1] * len(out),
            "completion_logprobs": list(getattr(tokens, "completion_logprobs", None) or []),
            "overlong_prompt": False,
            "is_truncated": truncated,
        }
    return {
        "prompt": prompt,
        "completion": completion,
        "response": response,
        "tokens": step_tokens,
        "reward": None,
        "advantage": None,
        "is_truncated": truncated,
        "trajectory_id": state.get("trajectory_id"),
        "extras": {},
    }


def _completion_tokens(turns: list[Any]) -> int:
    """Completion tokens of a rollout so far: everything after the first prompt, as the server
    tokenized it (env replies included); without token data, the sampled tokens alone."""
    first, last = turns[0], turns[-1]
    if getattr(first, "prompt_ids", None) and getattr(last, "prompt_ids", None):
        return len(last.prompt_ids) + len(last.completion_ids) - len(first.prompt_ids)
    return sum(len(getattr(t, "completion_ids", None) or []) for t in turns)
