"""Upstream's exception classes and first words, and its warnings, for rubrics and parsers.

Code written for a 0.1.x release catches ``ValueError`` / ``TypeError`` / ``KeyError`` and may
match the message; ours raises a subclass of the same class whose message starts with upstream's
words (read from the releases' sources), then our hint. The warnings upstream logged are logged
too (once per process here). The two checks upstream never made up front (a judge_prompt with
fields of its own, a reward function wrapped with ``update_wrapper(partial(f, ...), f)``) are
accepted; tests/parity/test_upstream_checks.py compares them with the releases themselves.
"""

from __future__ import annotations

import asyncio
import functools
import logging

import pytest

import verifiers as vf
from verifiers.errors import VerifiersError
from verifiers.utils.logging import reset_warn_once

CHAT = [{"role": "user", "content": "2+2?"}]
REPLY = [{"role": "assistant", "content": "4"}]


def one(completion) -> float:
    return 1.0


def two(completion) -> float:
    return 2.0


def judge_with(template: str):
    rubric = vf.JudgeRubric(judge_client=object(), judge_prompt=template)
    return asyncio.run(rubric.judge(CHAT, REPLY, "4", {}))


# (case, call, upstream's class, upstream's first words)
ERRORS = [
    ("weights", lambda: vf.Rubric(funcs=[one, two], weights=[1.0]), ValueError,
     "Number of weights (1) must match number of functions (2)"),
    ("empty group", lambda: vf.RubricGroup(rubrics=[]), ValueError, "RubricGroup must have at least one rubric"),
    ("empty tuple", lambda: vf.XMLParser([()]), ValueError, "Field tuple cannot be empty."),
    ("non-str alternative", lambda: vf.XMLParser([("code", 1)]), TypeError,
     "All alternatives in a tuple must be strings."),
    ("non-str field", lambda: vf.XMLParser([5]), TypeError, "Each field must be a string or a tuple of strings."),
    ("duplicate", lambda: vf.XMLParser(["answer", "answer"]), ValueError, "Duplicate field name: answer"),
    ("judge field", lambda: judge_with("{question} {context}"), KeyError, "'context'"),
    ("judge positional", lambda: judge_with("{question} {0}"), IndexError,
     "Replacement index 0 out of range for positional args tuple"),
    ("judge brace", lambda: judge_with("{question} {"), ValueError, "Single '{' encountered in format string"),
]  # fmt: skip


@pytest.mark.parametrize("case,call,cls,words", ERRORS, ids=[e[0] for e in ERRORS])
def test_upstream_class_and_first_words(case, call, cls, words):
    with pytest.raises(cls) as info:
        call()
    assert isinstance(info.value, VerifiersError), type(info.value)  # typed, with our hint after
    text = str(info.value)
    assert text.startswith(words), text
    assert "\n" not in text and len(text) > len(words) + 10, text


@pytest.fixture
def logged():
    """Messages logged under ``verifiers`` while the test runs (warn_once forgotten first)."""
    reset_warn_once()
    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            records.append(record.getMessage())

    logger = logging.getLogger("verifiers")
    handler, level = Keep(level=logging.WARNING), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    yield records
    logger.removeHandler(handler)
    logger.setLevel(level)
    reset_warn_once()


def _group():
    return vf.RubricGroup(rubrics=[vf.Rubric(funcs=[one])])


# (case, call, upstream's first words)
WARNINGS = [
    ("ThinkParser", lambda: vf.ThinkParser(), "ThinkParser is intended for use with models which always include"),
    ("XMLParser think", lambda: vf.XMLParser(["think", "answer"]),
     "You have included the 'think' field in the XMLParser."),
    ("group add_reward_func", lambda: _group().add_reward_func(two),
     "Adding reward function to the first rubric in the group."),
    ("group add_metric", lambda: _group().add_metric(two), "Adding metric to the first rubric in the group."),
    ("group add_class_object", lambda: _group().add_class_object("x", 1),
     "Adding class object to the first rubric in the group."),
]  # fmt: skip


@pytest.mark.parametrize("case,call,words", WARNINGS, ids=[w[0] for w in WARNINGS])
def test_upstream_warnings(case, call, words, logged):
    call()
    assert any(m.startswith(words) for m in logged), logged
    call()  # once per process, not once per object
    assert sum(m.startswith(words) for m in logged) == 1, logged


def test_judge_prompt_with_fields_of_its_own_is_built():
    """Upstream fills judge_prompt only in judge(): a subclass or reward function may fill {context}."""
    rubric = vf.JudgeRubric(judge_client=object(), judge_prompt="{question} {context} {response}")
    assert rubric.judge_prompt.format(question="q", context="c", response="r") == "q c r"


def test_judge_prompt_error_scores_zero_like_upstream():
    """The KeyError surfaces where upstream's did: inside the reward function, which scores 0."""
    rubric = vf.JudgeRubric(judge_client=object(), judge_prompt="{question} {context}")

    async def verdict(prompt, completion, answer, state, judge) -> float:
        return 1.0 if "yes" in await judge(prompt, completion, answer, state) else 0.0

    rubric.add_reward_func(verdict)
    state: dict = {}
    score = asyncio.run(rubric.score_rollout(CHAT, REPLY, "4", state))
    assert score.reward == 0.0 and score.metrics["verdict_error"] == 1.0
    assert state["reward_errors"] == {"verdict": "raised"}


def test_update_wrapper_partial_reward_func():
    """update_wrapper(partial(f, scale=3), f) reports f's signature; the partial bound ``scale``."""

    def scaled(completion, answer, scale) -> float:
        return scale * float(completion[-1]["content"] == answer)

    wrapped = functools.update_wrapper(functools.partial(scaled, scale=3.0), scaled)
    rubric = vf.Rubric(funcs=[wrapped])
    score = asyncio.run(rubric.score_rollout(CHAT, REPLY, "4", {}))
    assert score.reward == 3.0 and score.metrics == {"scaled": 3.0}


def test_wrapped_function_still_refused_when_the_wrapper_needs_the_argument():
    """A wrapper that itself needs an argument nobody passes is still refused, in one line."""

    def needs(completion, secret) -> float:
        return 1.0

    @functools.wraps(needs)
    def wrapper(completion, secret):
        return needs(completion, secret)

    with pytest.raises(ValueError, match="needs argument 'secret'"):
        vf.Rubric(funcs=[wrapper])
