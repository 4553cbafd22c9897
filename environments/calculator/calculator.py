"""calculator: products too long to work out in one's head, with a calculator tool.

A ``vf.ToolEnv`` with one tool, ``calculator(expression)``. Each task is a
product such as "What is 623 * 72?": a 135M model gets it right by itself
almost never, and almost always with the tool, so the reward (the right final
number) rises only as the model learns to call the tool, pass it the numbers
from the question, and copy the result into its answer. It is the tool task of
the multi-turn learning benchmark (``benchmarks/learning.py --suite multiturn``).

Small models rarely use a tool that is only described to them: SmolLM2-135M
made no call at all with the tool schema and instructions alone. So the prompt
also shows ``num_examples`` worked exchanges (question, tool call, tool result,
answer) as real chat messages, which the chat template renders in the model's
own tool format; with two of them SmolLM2 calls the tool in about 40% of replies.

The data is generated here, offline, from a seeded generator that uses only
``Random.random()`` (whose output Python keeps stable across versions).
"""

from __future__ import annotations

import random
import re
from typing import Any

import verifiers as vf
from verifiers.envs.builtin_tools import calculator
from verifiers.errors import ConfigError
from verifiers.utils.tool_utils import tool_call_example

SYSTEM_PROMPT = "Use the calculator tool to compute the answer, then reply with just the final number."

# Worked exchanges shown before the question: (expression, the answer the model gives).
# Their size does not matter; they show the call format and what to do with the result.
EXAMPLES = [("482 * 37", "17834"), ("915 * 64", "58560"), ("307 * 85", "26095")]

_INTEGER = re.compile(r"-?\d+")


def last_integer(text: str | None) -> int | None:
    """The last integer written in ``text`` (thousands commas allowed), or None."""
    found = _INTEGER.findall((text or "").replace(",", ""))
    return int(found[-1]) if found else None


def make_rows(count: int, seed: int, digits: tuple[int, int]) -> list[dict[str, Any]]:
    """``count`` products ``a * b`` with ``a`` of ``digits[0]`` digits and ``b`` of ``digits[1]``."""
    rng = random.Random(seed)

    def draw(n: int) -> int:
        low = 10 ** (n - 1)
        return low + int(rng.random() * (10**n - low))

    rows = []
    for _ in range(count):
        a, b = draw(digits[0]), draw(digits[1])
        rows.append({"question": f"What is {a} * {b}?", "answer": str(a * b)})
    return rows


def few_shot(num_examples: int) -> list[dict[str, Any]]:
    """``num_examples`` worked exchanges: question, calculator call, its result, the answer."""
    messages: list[dict[str, Any]] = []
    for i, (expression, result) in enumerate(EXAMPLES[:num_examples]):
        calls = [("calculator", {"expression": expression}, calculator(expression))]
        messages += tool_call_example(f"What is {expression}?", [calls], result, f"example_{i}")
    return messages


def load_environment(
    num_train_examples: int = 1000,
    num_eval_examples: int = 100,
    digits: list[int] | tuple[int, int] = (4, 3),
    num_examples: int = 2,
    max_turns: int = 3,
    system_prompt: str = SYSTEM_PROMPT,
    seed: int = 0,
) -> vf.Environment:
    """Build the calculator environment.

    Args:
        num_train_examples: training problems to generate (-1: 1000).
        num_eval_examples: evaluation problems, from a different seed stream (-1: 100).
        digits: digits of the two factors, e.g. ``[3, 2]`` for 623 * 72.
        num_examples: worked tool-call exchanges shown before each question (0 to 3).
        max_turns: most model turns per rollout (a call, then the answer, takes 2).
        system_prompt: instructions shown to the model.
        seed: seed of the generated problems (eval uses ``seed + 1_000_003``).
    """
    shape = tuple(digits) if isinstance(digits, (list, tuple)) else ()
    if len(shape) != 2 or not all(isinstance(d, int) and 1 <= d <= 12 for d in shape):
        raise ConfigError(
            f"digits must be two integers from 1 to 12, got {digits!r}", hint="e.g. digits=[3, 2]"
        )
    if not 0 <= num_examples <= len(EXAMPLES):
        raise ConfigError(
            f"num_examples must be 0 to {len(EXAMPLES)}, got {num_examples}", hint="e.g. num_examples=2"
        )
    if max_turns < 1:
        raise ConfigError(f"max_turns must be at least 1, got {max_turns}", hint="e.g. max_turns=3")
    from datasets import Dataset

    train = make_rows(num_train_examples if num_train_examples > 0 else 1000, seed, shape)
    test = make_rows(num_eval_examples if num_eval_examples > 0 else 100, seed + 1_000_003, shape)
    parser = vf.Parser()

    def correct_answer(completion, answer, **_) -> float:
        """1.0 when the last integer of the final reply is the product, else 0.0."""
        return 1.0 if last_integer(parser.parse_answer(completion)) == int(answer) else 0.0

    rubric = vf.RubricGroup(
        [
            vf.Rubric(funcs=[correct_answer], weights=[1.0], parser=parser),
            vf.ToolRubric(tools=[calculator]),
        ]
    )
    return vf.ToolEnv(
        tools=[calculator],
        max_turns=max_turns,
        dataset=Dataset.from_list(train),
        eval_dataset=Dataset.from_list(test),
        system_prompt=system_prompt,
        few_shot=few_shot(num_examples),
        parser=parser,
        rubric=rubric,
    )
