"""arithmetic: small-number sums and differences, answered with one number.

A first RL task for small models. SmolLM2-135M-Instruct knows the answers to
one-digit sums but at temperature 1 it mostly talks around them ("To add 5
and 9, we need to find a common multiple...") and runs out of tokens, so it is
right about one time in five. That gap between what the model knows and what
it samples is what GRPO closes quickly: replies that state the answer
outscore the rest of their group, so the reward rises within a few dozen
steps on a CPU, which makes this the task of the learning benchmark.

The data is generated here, offline, from a seeded generator that uses only
``Random.random()`` (whose output Python keeps stable across versions).
"""

from __future__ import annotations

import random
import re
from typing import Any

import verifiers as vf
from verifiers.errors import ConfigError

SYSTEM_PROMPT = "Answer with just the final number."

OPERATIONS = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b}

_INTEGER = re.compile(r"-?\d+")


def last_integer(text: str | None) -> int | None:
    """The last integer written in ``text`` ("2 + 3 = 5." gives 5; thousands commas allowed)."""
    found = _INTEGER.findall((text or "").replace(",", ""))
    return int(found[-1]) if found else None


def make_rows(count: int, seed: int, min_value: int, max_value: int, operations: str) -> list[dict[str, Any]]:
    """``count`` problems ``a <op> b`` with operands in [min_value, max_value].

    Differences are written larger-first, so every answer is a non-negative integer.
    """
    rng = random.Random(seed)
    span = max_value - min_value + 1
    rows = []
    for _ in range(count):
        a, b = (min_value + int(rng.random() * span) for _ in range(2))
        op = operations[int(rng.random() * len(operations))]
        if op == "-" and a < b:
            a, b = b, a
        rows.append({"question": f"What is {a} {op} {b}?", "answer": str(OPERATIONS[op](a, b))})
    return rows


def load_environment(
    num_train_examples: int = 1000,
    num_eval_examples: int = 100,
    min_value: int = 1,
    max_value: int = 9,
    operations: str = "+-",
    system_prompt: str = SYSTEM_PROMPT,
    seed: int = 0,
) -> vf.Environment:
    """Build the arithmetic environment.

    Args:
        num_train_examples: training problems to generate (-1: 1000).
        num_eval_examples: evaluation problems, from a different seed stream (-1: 100).
        min_value: smallest operand.
        max_value: largest operand.
        operations: the operators to draw from, any of ``+``, ``-`` and ``*``.
        system_prompt: instructions shown to the model.
        seed: seed of the generated problems.
    """
    if not 0 <= min_value <= max_value:
        raise ConfigError(
            f"need 0 <= min_value <= max_value, got {min_value} and {max_value}",
            hint="e.g. min_value=1, max_value=9",
        )
    unknown = sorted(set(operations) - set(OPERATIONS))
    if not operations or unknown:
        raise ConfigError(
            f"operations must be a non-empty string of + - *, got {operations!r}",
            hint='e.g. operations="+-"',
        )
    from datasets import Dataset

    shape = (min_value, max_value, operations)
    train = Dataset.from_list(make_rows(num_train_examples if num_train_examples > 0 else 1000, seed, *shape))
    test = Dataset.from_list(
        make_rows(num_eval_examples if num_eval_examples > 0 else 100, seed + 1_000_003, *shape)
    )
    parser = vf.Parser()

    def correct_answer(completion, answer, **_) -> float:
        """1.0 when the last integer of the reply is the answer, else 0.0."""
        return 1.0 if last_integer(parser.parse_answer(completion)) == int(answer) else 0.0

    rubric = vf.Rubric(funcs=[correct_answer], weights=[1.0], parser=parser)
    return vf.SingleTurnEnv(
        dataset=train, eval_dataset=test, system_prompt=system_prompt, parser=parser, rubric=rubric
    )
