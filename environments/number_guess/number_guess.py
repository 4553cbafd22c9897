"""number-guess: find a secret number with "higher" / "lower" feedback, in as few guesses as possible.

A ``vf.MultiTurnEnv`` without tools: the environment answers each guess. The
model guesses a whole number between 1 and ``max_number``; the environment
replies ``Higher: it is from 6 to 10.`` or ``Lower: it is from 1 to 4.``
(naming what is left of the range), and the game ends when the guess is right
or after ``max_turns`` guesses. A reply without a number (or with one out of
range) uses up a turn and gets a reminder of the rules.

Why the reply names the range: with bare "Higher." / "Lower." SmolLM2-135M
moved the way the reply said in only 27% of its consecutive valid guesses,
and 20 GRPO steps taught it to reply with numbers but not to use
the replies (the reward stayed flat). With the range spelled out, using the
feedback is a matter of picking a number from the range the message names.

The reward pays for winning, and more for winning sooner: ``1`` for a first
guess that is right, ``1/max_turns`` less for each further guess, ``0`` for a
game not won. So a policy improves both by winning more often and by using
the feedback (moving the right way, never repeating a ruled-out number) to win
earlier. It is the multi-turn task of the learning benchmark
(``benchmarks/learning.py --suite multiturn``).

The secrets are drawn offline from a seeded generator that uses only
``Random.random()`` (whose output Python keeps stable across versions).
"""

from __future__ import annotations

import random
import re
from typing import Any

import verifiers as vf
from verifiers.errors import ConfigError

SYSTEM_PROMPT = (
    "I am thinking of a whole number from 1 to {max_number}. Guess it. After each guess I tell you whether "
    "my number is higher or lower. Reply with just your guess, one number."
)

FIRST_QUESTION = "Your first guess?"
NEXT_GAME = "Correct! New game, new number. Your first guess?"

_INTEGER = re.compile(r"-?\d+")


def read_guess(text: str | None) -> int | None:
    """The guess in a reply: its last integer ("Is it 7?" gives 7), or None."""
    found = _INTEGER.findall(text or "")
    return int(found[-1]) if found else None


def answer_guess(secret: int, guess: int, low: int, high: int) -> tuple[str, int, int]:
    """The environment's reply to a wrong ``guess``, and the range still open after it.

    ``low``..``high`` is the range the earlier replies left; the reply names what is
    left of it ("Higher: it is from 6 to 10."), so a guess within it is never wasted.
    """
    if guess < secret:
        word, low = "Higher", max(low, guess + 1)
    else:
        word, high = "Lower", min(high, guess - 1)
    left = str(low) if low == high else f"from {low} to {high}"
    return f"{word}: it is {left}.", low, high


def example_games(count: int, max_number: int) -> list[dict[str, Any]]:
    """``count`` worked games as chat messages, each found by bisection from the middle.

    Each game but the first opens with the previous one's ``Correct!``; the last
    ends on the model's right guess, so the real game's first message
    (:data:`NEXT_GAME`) says ``Correct!`` and starts it.
    """
    messages: list[dict[str, Any]] = []
    for i in range(count):
        secret = 1 + (7 + 5 * i) * max_number // 10 % max_number  # fixed, spread-out secrets
        messages.append({"role": "user", "content": FIRST_QUESTION if i == 0 else NEXT_GAME})
        low, high = 1, max_number
        while True:
            guess = (low + high) // 2
            messages.append({"role": "assistant", "content": str(guess)})
            if guess == secret:
                break
            text, low, high = answer_guess(secret, guess, low, high)
            messages.append({"role": "user", "content": text})
    return messages


def make_rows(count: int, seed: int, max_number: int, question: str) -> list[dict[str, Any]]:
    """``count`` games, each a secret from 1 to ``max_number`` (``answer``)."""
    rng = random.Random(seed)
    return [{"question": question, "answer": str(1 + int(rng.random() * max_number))} for _ in range(count)]


class NumberGuessEnv(vf.MultiTurnEnv):
    """The game: ``state["guesses"]`` holds the numbers read from each reply (None: no valid number)."""

    def __init__(self, max_number: int, **kwargs: Any):
        self.max_number = max_number
        super().__init__(**kwargs)

    async def setup_state(self, state: vf.State, **kwargs: Any) -> vf.State:
        state["guesses"] = []
        state["low"], state["high"] = 1, self.max_number  # the range the replies have left open
        state["in_range"] = []  # per valid guess: was it inside that range?
        return state

    def _last_guess(self, messages: vf.Messages) -> int | None:
        guess = read_guess(self.parser.parse_answer(messages))
        return guess if guess is not None and 1 <= guess <= self.max_number else None

    async def is_completed(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> bool:
        # Asked after every model turn, and (0.1.4's loop) before each model call: a guess is
        # recorded once, after the model's turn; env_response answers it.
        if not messages or messages[-1].get("role") != "assistant":
            return False
        guess = self._last_guess(messages)
        state["guesses"].append(guess)
        if guess is not None:
            state["in_range"].append(state["low"] <= guess <= state["high"])
        return guess == int(state["answer"])

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any):
        guess, low, high = state["guesses"][-1], state["low"], state["high"]
        if guess is None:
            text = f"Reply with just one whole number from {low} to {high}."
        else:
            text, state["low"], state["high"] = answer_guess(int(state["answer"]), guess, low, high)
        return [{"role": "user", "content": text}], state


def load_environment(
    num_train_examples: int = 1000,
    num_eval_examples: int = 100,
    max_number: int = 10,
    max_turns: int = 5,
    num_examples: int = 1,
    system_prompt: str | None = None,
    seed: int = 0,
) -> vf.Environment:
    """Build the number-guess environment.

    Args:
        num_train_examples: training games to generate (-1: 1000).
        num_eval_examples: evaluation games, from a different seed stream (-1: 100).
        max_number: the secret is a whole number from 1 to this.
        max_turns: most guesses per game.
        num_examples: worked games (found by bisection) shown before the real one.
        system_prompt: the rules shown to the model (``{max_number}`` is filled in); default: the rules above.
        seed: seed of the secrets (eval uses ``seed + 1_000_003``).
    """
    if max_number < 2:
        raise ConfigError(f"max_number must be at least 2, got {max_number}", hint="e.g. max_number=10")
    if max_turns < 1:
        raise ConfigError(f"max_turns must be at least 1, got {max_turns}", hint="e.g. max_turns=5")
    if not 0 <= num_examples <= 5:
        raise ConfigError(f"num_examples must be 0 to 5, got {num_examples}", hint="e.g. num_examples=1")
    from datasets import Dataset

    question = NEXT_GAME if num_examples else FIRST_QUESTION
    train = make_rows(num_train_examples if num_train_examples > 0 else 1000, seed, max_number, question)
    test = make_rows(
        num_eval_examples if num_eval_examples > 0 else 100, seed + 1_000_003, max_number, question
    )
    parser = vf.Parser()

    def win_sooner(state, **_) -> float:
        """1 for a right first guess, 1/max_turns less per further guess; 0 if not won."""
        guesses = state.get("guesses") or []
        if not guesses or guesses[-1] != int(state["answer"]):
            return 0.0
        return 1.0 - (len(guesses) - 1) / max_turns

    def won(state, **_) -> float:
        """1 if the game was won (tracked, weight 0)."""
        guesses = state.get("guesses") or []
        return float(bool(guesses) and guesses[-1] == int(state["answer"]))

    def valid_guesses(state, **_) -> float:
        """Share of replies that held a number in range (tracked, weight 0)."""
        guesses = state.get("guesses") or []
        return sum(g is not None for g in guesses) / len(guesses) if guesses else 0.0

    def in_range_guesses(state, **_) -> float:
        """Share of valid guesses inside the range the replies had left open (tracked, weight 0)."""
        in_range = state.get("in_range") or []
        return sum(in_range) / len(in_range) if in_range else 0.0

    def num_guesses(state, **_) -> float:
        """Replies in the game (tracked, weight 0)."""
        return float(len(state.get("guesses") or []))

    rubric = vf.Rubric(
        funcs=[win_sooner, won, valid_guesses, in_range_guesses, num_guesses],
        weights=[1.0, 0.0, 0.0, 0.0, 0.0],
        parser=parser,
    )
    prompt = (system_prompt or SYSTEM_PROMPT).replace("{max_number}", str(max_number))
    return NumberGuessEnv(
        max_number=max_number,
        max_turns=max_turns,
        dataset=Dataset.from_list(train),
        eval_dataset=Dataset.from_list(test),
        system_prompt=prompt,
        few_shot=example_games(num_examples, max_number),
        parser=parser,
        rubric=rubric,
    )
