"""``TextArenaEnv`` (0.1.10+'s ``verifiers.envs.integrations.textarena_env``): a one-player game
of the ``textarena`` package (Wordle by default), played turn by turn.

As upstream: the game is made once (``textarena.make(game)``, reset for one player); the rows
are its opening observation, each with a secret word drawn from the game's word list with
``seed``; per rollout a deep copy of the game gets the row's word; each model reply is parsed
(``XMLParser(["think", "guess"], answer_field="guess")`` by default) and played as the move;
the game's observation, through ``feedback_fn``, is the reply, and once the game is over its
reason is the final message (``state["final_env_response"]``).

Differences: upstream downloads nltk word lists when constructed; nothing is downloaded here,
so textarena's word data must already be installed. Without ``textarena`` the module still
imports, and constructing the class raises ``MissingPackageError`` (``pip install textarena``).
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import random
from collections.abc import Callable
from typing import Any

from verifiers.envs.decorators import cleanup
from verifiers.envs.multiturn import MultiTurnEnv
from verifiers.errors import MissingPackageError
from verifiers.parsers.xml_parser import XMLParser
from verifiers.types import Messages, State, UserMessage

__all__ = ["TextArenaEnv"]


def import_textarena() -> Any:
    """The ``textarena`` module, or ``MissingPackageError`` naming it."""
    try:
        return importlib.import_module("textarena")
    except ModuleNotFoundError as err:
        if err.name and err.name.split(".")[0] in ("textarena", "nltk"):
            raise MissingPackageError("TextArenaEnv", str(err.name.split(".")[0])) from err
        raise


class TextArenaEnv(MultiTurnEnv):
    """A textarena game (see the module)."""

    def __init__(
        self,
        game: str = "Wordle-v0",
        num_train_examples: int = 1000,
        num_eval_examples: int = 0,
        system_prompt: str | None = None,
        parser: Any = None,
        rubric: Any = None,
        feedback_fn: Callable[[str], str] = lambda x: x,
        seed: int = 0,
        **kwargs: Any,
    ):
        ta = import_textarena()
        parser = parser or XMLParser(fields=["think", "guess"], answer_field="guess")
        self.game = game
        self.ta_env = ta.make(env_id=game)
        self.ta_env.reset(num_players=1)
        self.num_train_examples = int(num_train_examples)
        self.num_eval_examples = int(num_eval_examples)
        self.seed = seed
        self.feedback_fn = feedback_fn
        dataset, eval_dataset = self.ta_to_hf()
        super().__init__(
            dataset=dataset,
            eval_dataset=eval_dataset,
            system_prompt=system_prompt,
            parser=parser,
            rubric=rubric,
            message_type="chat",
            **kwargs,
        )

    def ta_to_hf(self) -> tuple[Any, Any]:
        """Rows: the game's opening observation, each with a secret word (``answer``)."""
        from datasets import Dataset

        _, question = self.ta_env.get_observation()
        words = list(self.ta_env.word_list)
        rng = random.Random(self.seed)
        rows = [
            {"question": question, "answer": rng.choice(words)}
            for _ in range(self.num_train_examples + self.num_eval_examples)
        ]
        train, held_out = rows[: self.num_train_examples], rows[self.num_train_examples :]
        return (Dataset.from_list(train) if train else None), (
            Dataset.from_list(held_out) if held_out else None
        )

    def _shared_memo(self) -> dict:
        # The game's dictionary and word list are read-only: share them between copies
        # instead of copying tens of MB per rollout.
        memo: dict = {}
        inner = self.ta_env
        while hasattr(inner, "env"):
            inner = inner.env
        for name in ("dictionary", "word_list"):
            value = getattr(inner, name, None)
            if value is not None:
                memo[id(value)] = value
        return memo

    async def setup_state(self, state: State, **kwargs: Any) -> State:
        game = await asyncio.to_thread(copy.deepcopy, self.ta_env, self._shared_memo())
        game.state.game_state["secret_word"] = state["answer"]
        state["ta_env"] = game
        return state

    @cleanup
    async def cleanup_ta_env(self, state: State) -> None:
        state.pop("ta_env", None)

    async def env_response(self, messages: Messages, state: State, **kwargs: Any) -> Messages:
        game = state["ta_env"]
        guess = self.parser.parse_answer(messages)
        await asyncio.to_thread(game.step, str(guess))
        if game.state.done:
            reply = UserMessage(content=str(game.state.game_info[0]["reason"]))
            state["final_env_response"] = [reply]
            return [reply]
        _, observation = await asyncio.to_thread(game.get_observation)
        return [UserMessage(content=str(self.feedback_fn(observation)))]
