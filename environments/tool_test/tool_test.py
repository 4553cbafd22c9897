"""tool-test: a tiny tool-calling check: call exactly the tools the task names.

A ``vf.ToolEnv`` with eight small deterministic tools. Each task names one to
``max_tools`` of them, with arguments, and asks the model to call each once
and then reply ``DONE``. The reward is 1 when the set of tools called is
exactly the set asked for; a Jaccard overlap and per-tool call counts are
tracked as metrics. It exercises the whole tool path (schemas, tool calls,
tool results, multi-turn) with a model as small as SmolLM2.
"""

from __future__ import annotations

import random
from typing import Any

import verifiers as vf
from verifiers.errors import ConfigError
from verifiers.utils.tool_utils import tool_call_example

_CAPITALS = {"france": "Paris", "japan": "Tokyo", "kenya": "Nairobi", "peru": "Lima", "canada": "Ottawa"}
_WORDS = "apple river silver window garden rocket pencil planet".split()
_CITIES = "Oslo Lagos Quito Hanoi Perth Lyon".split()


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a + b


def multiply(a: float, b: float) -> float:
    """Multiply two numbers.

    Args:
        a: The first number.
        b: The second number.
    """
    return a * b


def reverse_text(text: str) -> str:
    """Reverse a text character by character.

    Args:
        text: The text to reverse.
    """
    return text[::-1]


def to_uppercase(text: str) -> str:
    """Convert a text to upper case.

    Args:
        text: The text to convert.
    """
    return text.upper()


def word_count(text: str) -> int:
    """Count the words in a text.

    Args:
        text: The text whose words to count.
    """
    return len(text.split())


def get_weather(city: str) -> str:
    """Get today's weather for a city (a fixed, made-up report).

    Args:
        city: The city name.
    """
    kinds = ("sunny", "cloudy", "rainy", "windy")
    return f"{city}: {kinds[sum(map(ord, city)) % len(kinds)]}, {10 + len(city) % 15} C"


def lookup_capital(country: str) -> str:
    """Look up the capital city of a country.

    Args:
        country: The country name.
    """
    return _CAPITALS.get(country.strip().lower(), f"unknown country: {country}")


def current_time(timezone: str = "UTC") -> str:
    """Get the current time in a timezone (a fixed, made-up clock).

    Args:
        timezone: The timezone name, e.g. UTC.
    """
    return f"12:00 {timezone}"


TOOLS = [add, multiply, reverse_text, to_uppercase, word_count, get_weather, lookup_capital, current_time]

SYSTEM_PROMPT = (
    "You can call tools. Call exactly the tools the user asks for, each once, with the arguments given. "
    "When all of them have returned, reply with the single word DONE."
)


def _request(name: str, rng: random.Random) -> str:
    """A sentence asking for one call of the tool ``name`` with concrete arguments."""

    def pick(options: list[str]) -> str:
        return options[int(rng.random() * len(options))]

    def number() -> int:
        return 10 + int(rng.random() * 90)

    if name == "add":
        return f"call `add` with a={number()} and b={number()}"
    if name == "multiply":
        return f"call `multiply` with a={number()} and b={number()}"
    if name in ("reverse_text", "to_uppercase"):
        return f"call `{name}` with text='{pick(_WORDS)}'"
    if name == "word_count":
        return f"call `word_count` with text='{pick(_WORDS)} {pick(_WORDS)} {pick(_WORDS)}'"
    if name == "get_weather":
        return f"call `get_weather` with city='{pick(_CITIES)}'"
    if name == "lookup_capital":
        return f"call `lookup_capital` with country='{pick(list(_CAPITALS)).title()}'"
    return f"call `current_time` with timezone='{pick(['UTC', 'CET', 'JST'])}'"


def make_rows(count: int, seed: int, min_tools: int, max_tools: int) -> list[dict[str, Any]]:
    """``count`` tasks, each naming ``min_tools``..``max_tools`` distinct tools; ``info["tools"]`` lists them."""
    rng = random.Random(seed)
    names = [tool.__name__ for tool in TOOLS]
    rows = []
    for _ in range(count):
        pool = list(names)
        k = min_tools + int(rng.random() * (max_tools - min_tools + 1))
        chosen = [pool.pop(int(rng.random() * len(pool))) for _ in range(k)]
        steps = "; ".join(_request(name, rng) for name in chosen)
        question = f"Please {steps}. Call each of these tools once and no others, then reply DONE."
        rows.append({"question": question, "answer": ",".join(sorted(chosen)), "info": {"tools": chosen}})
    return rows


# Worked exchanges shown before the task: (the tools it asks for, with their arguments).
EXAMPLES = [
    [("add", {"a": 12, "b": 40}), ("reverse_text", {"text": "apple"})],
    [("lookup_capital", {"country": "Japan"})],
]


def _ask(name: str, args: dict[str, Any]) -> str:
    """The request sentence for one call, as ``_request`` writes it."""
    given = " and ".join(f"{k}={v!r}" if isinstance(v, str) else f"{k}={v}" for k, v in args.items())
    return f"call `{name}` with {given}"


def few_shot(num_examples: int) -> list[dict[str, Any]]:
    """``num_examples`` worked tasks: the request, the calls (run for real), then ``DONE``."""
    tools = {tool.__name__: tool for tool in TOOLS}
    messages: list[dict[str, Any]] = []
    for i, calls in enumerate(EXAMPLES[:num_examples]):
        steps = "; ".join(_ask(name, args) for name, args in calls)
        question = f"Please {steps}. Call each of these tools once and no others, then reply DONE."
        rounds = [[(name, args, tools[name](**args)) for name, args in calls]]
        messages += tool_call_example(question, rounds, "DONE", f"example_{i}")
    return messages


def exact_tool_set(completion, info, **_) -> float:
    """1.0 if the tools called are exactly the tools asked for (repeats allowed), else 0.0."""
    return 1.0 if set(vf.Parser.get_tool_call_names(completion)) == set(info["tools"]) else 0.0


def tool_set_overlap(completion, info, **_) -> float:
    """Jaccard overlap of the called and the asked-for tool names (tracked, weight 0)."""
    called, wanted = set(vf.Parser.get_tool_call_names(completion)), set(info["tools"])
    return len(called & wanted) / len(called | wanted) if called | wanted else 1.0


def load_environment(
    num_train_examples: int = 500,
    num_eval_examples: int = 50,
    min_tools: int = 1,
    max_tools: int = 3,
    max_turns: int = 5,
    num_examples: int = 2,
    system_prompt: str = SYSTEM_PROMPT,
    seed: int = 0,
) -> vf.Environment:
    """Build the tool-test environment.

    Args:
        num_train_examples: training tasks to generate (-1: 500).
        num_eval_examples: evaluation tasks to generate, from another seed stream (-1: 50).
        min_tools: fewest tools a task names.
        max_tools: most tools a task names (at most 8, the number of tools).
        max_turns: most model turns per rollout.
        num_examples: worked tasks (request, tool calls, results, DONE) shown before each task (0 to 2).
        system_prompt: instructions shown to the model.
        seed: generator seed (eval uses ``seed + 1_000_003``).
    """
    if not 1 <= min_tools <= max_tools <= len(TOOLS):
        raise ConfigError(
            f"need 1 <= min_tools <= max_tools <= {len(TOOLS)}, got {min_tools} and {max_tools}"
        )
    if not 0 <= num_examples <= len(EXAMPLES):
        raise ConfigError(f"num_examples must be 0 to {len(EXAMPLES)}, got {num_examples}")
    from datasets import Dataset

    train = make_rows(num_train_examples if num_train_examples > 0 else 500, seed, min_tools, max_tools)
    test = make_rows(
        num_eval_examples if num_eval_examples > 0 else 50, seed + 1_000_003, min_tools, max_tools
    )
    parser = vf.Parser()
    rubric = vf.RubricGroup(
        [
            vf.Rubric(funcs=[exact_tool_set, tool_set_overlap], weights=[1.0, 0.0], parser=parser),
            vf.ToolRubric(tools=TOOLS),
        ]
    )
    return vf.ToolEnv(
        tools=TOOLS,
        max_turns=max_turns,
        dataset=Dataset.from_list(train),
        eval_dataset=Dataset.from_list(test),
        system_prompt=system_prompt,
        few_shot=few_shot(num_examples),
        parser=parser,
        rubric=rubric,
    )
