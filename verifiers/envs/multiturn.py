"""``MultiTurnEnv``: alternate model turns and environment turns until done.

Loop per rollout: model call -> ``is_completed``? -> ``env_response`` -> model
call ... It stops when ``is_completed`` says so, after ``max_turns`` model
calls, when a turn is cut at ``max_tokens`` (``finish_reason == "length"``:
``state["is_truncated"] = True``), or when the prompt outgrows the model's
context window (also truncated). A hook or model call that raises ends the
rollout with ``state["failure"]`` set (a ``RolloutFailure`` whose kind names
the hook, see rollout/failure.py); it is logged once per env class and never
stops the other rollouts.
"""

from __future__ import annotations

import time
from abc import abstractmethod
from typing import Any

from verifiers.envs.dataset_format import clean_prompt, parse_info
from verifiers.envs.environment import Environment
from verifiers.envs.model_client import extract_turn_tokens, response_message
from verifiers.envs.state import new_state
from verifiers.errors import PromptTooLongError
from verifiers.rollout.failure import FailureKind, format_error, model_call_kind, record_failure
from verifiers.types import ChatMessage, Info, Messages, SamplingArgs, State
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


class MultiTurnEnv(Environment):
    """Subclasses implement ``is_completed`` and ``env_response``; ``setup_state`` is optional.

    The base-class hooks are ``async`` (as in 0.1.x), so an override may
    ``await super().is_completed(...)``. An override itself may be sync or
    async: the rollout awaits whatever it returns when that is awaitable.
    """

    def __init__(self, max_turns: int = -1, **kwargs: Any):
        self.max_turns = max_turns
        super().__init__(**kwargs)

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        """Prepare per-rollout state before the first model call (an override may be sync; may return None)."""
        return state

    async def max_turns_reached(self, state: State) -> bool:
        """True once the rollout has had ``max_turns`` model turns (never when ``max_turns <= 0``)."""
        return self.max_turns > 0 and state["turn"] >= self.max_turns

    @abstractmethod
    async def is_completed(self, messages: Messages, state: State, **kwargs: Any) -> bool:
        """True when the rollout is done; called after every model turn (an override may be sync).

        The base version, for ``await super().is_completed(...)``, says whether
        ``max_turns`` is reached (the rollout also stops there by itself).
        """
        return await self.max_turns_reached(state)

    @abstractmethod
    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> tuple[Messages, State]:
        """The environment's reply to the last model turn: ``(new messages, state)`` (an override may be sync)."""
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
        model: str,
        prompt: Messages,
        answer: str = "",
        task: str = "default",
        info: Info | None = None,
        sampling_args: SamplingArgs | None = None,
        **kwargs: Any,
    ) -> tuple[Messages, State]:
        start = time.perf_counter()
        info = parse_info(info)
        prompt = clean_prompt(prompt)
        chat = not isinstance(prompt, str)
        state = new_state(prompt, answer, task, info)
        args = {**self.sampling_args, **(sampling_args or {})}
        tools = self.tools_for(info) if chat else None
        # Working copy of the conversation; the state's prompt stays as given.
        messages: Messages = clean_prompt(prompt)
        completion: Messages = [] if chat else ""
        state["completion"] = completion

        def add(new: Messages | ChatMessage) -> None:
            nonlocal messages, completion
            if not chat:
                messages += new if isinstance(new, str) else "".join(str(m.get("content", "")) for m in new)
                completion += new if isinstance(new, str) else "".join(str(m.get("content", "")) for m in new)
                state["completion"] = completion
                return
            items = [new] if isinstance(new, dict) else list(new or [])
            messages.extend(items)
            completion.extend(items)

        try:
            state = (await resolve(self.setup_state(state, **kwargs))) or state
        except Exception as err:
            self._fail(state, FailureKind.SETUP_STATE, err)
            return self._finish(completion, state, start)

        while True:
            try:
                response = await self.get_model_response(
                    client,
                    model,
                    messages,
                    oai_tools=tools,
                    sampling_args=args,
                    message_type=self.message_type,
                )
            except PromptTooLongError:
                # The history no longer fits: a length limit, not a failure.
                state["is_truncated"] = True
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
            if tokens.finish_reason == "length":
                state["is_truncated"] = True
                break
            try:
                if await resolve(self.is_completed(messages, state, **kwargs)):
                    break
            except Exception as err:
                self._fail(state, FailureKind.IS_COMPLETED, err)
                break
            if self.max_turns > 0 and state["turn"] >= self.max_turns:
                break
            try:
                env_messages, new_state_ = await resolve(self.env_response(messages, state, **kwargs))
            except Exception as err:
                self._fail(state, FailureKind.ENV_RESPONSE, err)
                break
            state = new_state_ if new_state_ is not None else state
            add(env_messages)
        return self._finish(completion, state, start)

    @staticmethod
    def _finish(completion: Messages, state: State, start: float) -> tuple[Messages, State]:
        state["completion"] = completion
        state.setdefault("timing", {})["generation_ms"] = (time.perf_counter() - start) * 1000
        return completion, state
