"""``SingleTurnEnv``: one prompt, one model response, done (chat or completion API)."""

from __future__ import annotations

from typing import Any

from verifiers.envs.multiturn import MultiTurnEnv, completed_from_state
from verifiers.types import Messages, State


class SingleTurnEnv(MultiTurnEnv):
    """The rollout ends after the first model response; there is no environment turn."""

    def __init__(self, **kwargs: Any):
        kwargs.pop("max_turns", None)  # always exactly one turn
        super().__init__(max_turns=1, **kwargs)

    @completed_from_state
    async def is_completed(self, messages: Messages, state: State, **kwargs: Any) -> bool:
        return True

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> tuple[Messages, State]:
        # Never called (is_completed is always True); present to satisfy the interface.
        return ([] if isinstance(messages, list) else ""), state
