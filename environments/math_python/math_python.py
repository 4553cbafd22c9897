"""math-python: math problems solved with a sandboxed Python tool.

A ``vf.ToolEnv`` whose one tool, ``python(code)``, runs the model's program in
``verifiers.envs.sandbox`` (a separate, resource-limited process without
network or write access outside its scratch directory) and returns what it
printed, or the error. Escape attempts come back to the model as tool errors.

The problems are generated here, offline, by seeded templates whose answers
are computed exactly (number theory, combinatorics, sequences, linear
equations): easy to state, tedious by hand, quick in Python, so the tool is
worth calling. The final answer goes in ``\\boxed{}`` and is checked with
``vf.MathRubric``; ``vf.ToolRubric`` tracks the tool calls.
"""

from __future__ import annotations

import bisect
import math
import random
from collections.abc import Callable
from fractions import Fraction
from functools import lru_cache

import verifiers as vf
from verifiers.envs.sandbox import arun_python
from verifiers.errors import ConfigError
from verifiers.utils.tool_utils import tool_call_example

SYSTEM_PROMPT = (
    "Solve the math problem. You can run Python with the `python` tool: pass a complete program and "
    "print() what you need to see (the standard library is available; numpy and sympy when installed). "
    "When you know the answer, reply with it inside \\boxed{}, for example \\boxed{42}."
)

SPLITS = {"train": 1000, "test": 200}
"""Split name -> number of problems; splits never share a problem."""


def _int(rng: random.Random, low: int, high: int) -> int:
    """A uniform integer in [low, high] (only ``Random.random()``: stable across Python versions)."""
    return low + int(rng.random() * (high - low + 1))


@lru_cache(maxsize=1)
def _primes() -> list[int]:
    """Every prime up to 200,000 (the largest bound any template uses), by a sieve."""
    n = 200_000
    sieve = bytearray([1]) * (n + 1)
    sieve[0:2] = b"\x00\x00"
    for p in range(2, math.isqrt(n) + 1):
        if sieve[p]:
            sieve[p * p :: p] = bytearray(len(range(p * p, n + 1, p)))
    return [i for i in range(n + 1) if sieve[i]]


def _primes_between(lo: int, hi: int) -> list[int]:
    primes = _primes()
    return primes[bisect.bisect_left(primes, lo) : bisect.bisect_right(primes, hi)]


def _fib(k: int) -> int:
    a, b = 0, 1
    for _ in range(k):
        a, b = b, a + b
    return a


def _divisors(n: int) -> int:
    count, p = 1, 2
    while p * p <= n:
        e = 0
        while n % p == 0:
            n, e = n // p, e + 1
        count *= e + 1
        p += 1
    return count * (2 if n > 1 else 1)


def _fraction(value: Fraction) -> str:
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _modpow(rng):
    a, b, m = _int(rng, 2, 99), _int(rng, 50, 5000), _int(rng, 7, 997)
    return f"What is the remainder when {a}^{b} is divided by {m}?", str(pow(a, b, m))


def _prime_count(rng):
    lo = _int(rng, 1, 5000)
    hi = lo + _int(rng, 100, 5000)
    n = len(_primes_between(lo, hi))
    return f"How many prime numbers are there between {lo} and {hi}, inclusive?", str(n)


def _digit_sum_factorial(rng):
    n = _int(rng, 15, 80)
    return f"What is the sum of the digits of {n}! ({n} factorial)?", str(
        sum(map(int, str(math.factorial(n))))
    )


def _divisor_count(rng):
    n = _int(rng, 1000, 2_000_000)
    return f"How many positive divisors does {n} have?", str(_divisors(n))


def _gcd_lcm(rng):
    a, b, c = (_int(rng, 12, 999) for _ in range(3))
    if rng.random() < 0.5:
        g = _int(rng, 2, 60)
        return f"What is the greatest common divisor of {a * g} and {b * g}?", str(math.gcd(a * g, b * g))
    return f"What is the least common multiple of {a}, {b} and {c}?", str(math.lcm(a, b, c))


def _fibonacci(rng):
    k = _int(rng, 25, 90)
    return f"With F(1) = F(2) = 1 and F(n) = F(n-1) + F(n-2), what is F({k})?", str(_fib(k))


def _divisible_count(rng):
    n, a, b = _int(rng, 500, 100000), _int(rng, 3, 40), _int(rng, 3, 40)
    count = n // a + n // b - n // math.lcm(a, b)
    return f"How many integers from 1 to {n} are divisible by {a} or by {b} (or both)?", str(count)


def _multiples_sum(rng):
    n, a, b = _int(rng, 100, 20000), _int(rng, 3, 25), _int(rng, 3, 25)

    def below(k: int) -> int:  # sum of the multiples of k below n
        m = (n - 1) // k
        return k * m * (m + 1) // 2

    total = below(a) + below(b) - below(math.lcm(a, b))
    return f"What is the sum of all positive integers below {n} that are multiples of {a} or {b}?", str(total)


def _trailing_zeros(rng):
    n = _int(rng, 100, 100000)
    zeros, p = 0, 5
    while p <= n:
        zeros, p = zeros + n // p, p * 5
    return f"How many zeros does {n}! ({n} factorial) end with?", str(zeros)


def _linear_equation(rng):
    a, c = _int(rng, 2, 40), _int(rng, 41, 90)
    b, d = _int(rng, -500, 500), _int(rng, -500, 500)
    x = Fraction(d - b, a - c)
    question = f"Solve for x: {a}x + {b} = {c}x + {d}. Give x as an integer or a fraction in lowest terms."
    return question.replace("+ -", "- "), _fraction(x)


def _binomial(rng):
    n = _int(rng, 20, 60)
    k = _int(rng, 3, n // 2)
    return f"In how many ways can a committee of {k} people be chosen from {n} people?", str(math.comb(n, k))


def _prime_sum(rng):
    n = _int(rng, 1000, 200000)
    return f"What is the sum of all prime numbers less than {n}?", str(sum(_primes_between(2, n - 1)))


TEMPLATES: tuple[Callable[[random.Random], tuple[str, str]], ...] = (
    _modpow,
    _prime_count,
    _digit_sum_factorial,
    _divisor_count,
    _gcd_lcm,
    _fibonacci,
    _divisible_count,
    _multiples_sum,
    _trailing_zeros,
    _linear_equation,
    _binomial,
    _prime_sum,
)

_SEED = 20250301


@lru_cache(maxsize=1)
def _all_problems() -> tuple[tuple[str, str], ...]:
    """Every split's unique (question, answer) pairs, in a fixed order."""
    rng = random.Random(_SEED)
    seen: dict[str, str] = {}
    while len(seen) < sum(SPLITS.values()):
        question, answer = TEMPLATES[int(rng.random() * len(TEMPLATES))](rng)
        seen.setdefault(question, answer)
    return tuple(seen.items())


def rows(split: str) -> list[dict[str, str]]:
    """The problems of ``split`` (one of :data:`SPLITS`), in a fixed order."""
    if split not in SPLITS:
        raise KeyError(split)
    start = 0 if split == "train" else SPLITS["train"]
    return [{"question": q, "answer": a} for q, a in _all_problems()[start : start + SPLITS[split]]]


# Worked exchanges shown before the problem: (question, the program, what it prints).
# tests/test_bundled_envs.py checks that the sandbox prints exactly that.
EXAMPLES = [
    ("What is the remainder when 7^222 is divided by 13?", "print(pow(7, 222, 13))", str(pow(7, 222, 13))),
    (
        "In how many ways can a committee of 4 people be chosen from 30 people?",
        "import math\nprint(math.comb(30, 4))",
        str(math.comb(30, 4)),
    ),
]


def few_shot(num_examples: int) -> list[dict]:
    """``num_examples`` worked problems: the question, one ``python`` call, its output, the boxed answer."""
    messages: list[dict] = []
    for i, (question, code, printed) in enumerate(EXAMPLES[:num_examples]):
        rounds = [[("python", {"code": code}, printed)]]
        messages += tool_call_example(question, rounds, f"\\boxed{{{printed}}}", f"example_{i}")
    return messages


def make_python_tool(timeout_s: float, memory_mb: int, max_output_bytes: int) -> Callable:
    """The ``python`` tool, running code in the sandbox with these limits."""

    async def python(code: str) -> str:
        """Run a Python program in a sandbox and return what it printed (stdout, then stderr, then any error).

        Args:
            code: A complete Python program. Use print() to show results; there is no network and only a scratch directory is writable.
        """
        result = await arun_python(
            code, timeout_s=timeout_s, memory_mb=memory_mb, max_output_bytes=max_output_bytes
        )
        return result.to_text()

    return python


def load_environment(
    num_train_examples: int = -1,
    num_eval_examples: int = 50,
    max_turns: int = 6,
    timeout_s: float = 10.0,
    memory_mb: int = 512,
    max_output_bytes: int = 4096,
    num_examples: int = 2,
    system_prompt: str = SYSTEM_PROMPT,
    seed: int = 0,
    eval_split: str = "test",
) -> vf.Environment:
    """Build the math-python environment.

    Args:
        num_train_examples: training problems to keep (-1: all 1000).
        num_eval_examples: evaluation problems to keep (-1: all 200).
        max_turns: most model turns per rollout (tool calls plus the answer).
        timeout_s: wall-clock limit of one python call (the CPU limit is the same).
        memory_mb: memory limit of one python call.
        max_output_bytes: bytes of stdout and of stderr returned to the model per call.
        num_examples: worked problems (question, python call, output, boxed answer) shown first (0 to 2).
        system_prompt: instructions shown to the model.
        seed: seed of the random subset taken when a count is given.
        eval_split: the split evaluated on ("test", or "train" to evaluate on training problems).
    """
    if eval_split not in SPLITS:
        raise ConfigError(f"eval_split must be one of {sorted(SPLITS)}, got {eval_split!r}")
    if not 0 <= num_examples <= len(EXAMPLES):
        raise ConfigError(f"num_examples must be 0 to {len(EXAMPLES)}, got {num_examples}")
    from datasets import Dataset

    def take(split: str, n: int) -> Dataset:
        problems = rows(split)
        if 0 <= n < len(problems):
            rng = random.Random(seed)
            problems = sorted(problems, key=lambda _: rng.random())[:n]
        return Dataset.from_list(problems)

    tool = make_python_tool(timeout_s, memory_mb, max_output_bytes)
    parser = vf.Parser(extract_fn=vf.extract_boxed_answer)
    rubric = vf.RubricGroup([vf.MathRubric(parser=parser), vf.ToolRubric(tools=[tool])])
    env = vf.ToolEnv(
        tools=[tool],
        max_turns=max_turns,
        dataset=take("train", num_train_examples),
        eval_dataset=take(eval_split, num_eval_examples),
        system_prompt=system_prompt,
        few_shot=few_shot(num_examples),
        parser=parser,
        rubric=rubric,
    )
    # The sandbox enforces timeout_s itself; this only guards against a stuck sandbox.
    env.tool_timeout = timeout_s + 30.0
    return env
