"""Rubric, RubricGroup, JudgeRubric, ToolRubric and MathRubric."""

from __future__ import annotations

import asyncio
import logging
import math
import sys
import threading
import time
from types import SimpleNamespace

import pytest

from verifiers.errors import ConfigError, MissingExtraError
from verifiers.parsers.parser import Parser
from verifiers.parsers.xml_parser import XMLParser
from verifiers.rubrics import rubric as rubric_module
from verifiers.rubrics.group import RubricGroup
from verifiers.rubrics.judge import JudgeRubric
from verifiers.rubrics.rubric import Rubric
from verifiers.rubrics.tool import ToolRubric
from verifiers.types import RolloutScore, RolloutScores
from verifiers.utils.logging import reset_warn_once

PROMPT = [{"role": "user", "content": "What is 1/2 as a decimal?"}]
ALL_ARGS = {"prompt", "completion", "answer", "state", "task", "info", "parser"}


def said(text: str) -> list[dict]:
    return [{"role": "assistant", "content": text}]


@pytest.fixture(autouse=True)
def fresh_warnings(monkeypatch):
    reset_warn_once()
    # setup_logging (called by other code in the same process) stops propagation; caplog listens at the root.
    monkeypatch.setattr(logging.getLogger("verifiers"), "propagate", True)
    yield
    reset_warn_once()


def exact(completion, answer) -> float:
    return 1.0 if completion[-1]["content"] == answer else 0.0


# -- dispatch ---------------------------------------------------------------------


async def test_functions_receive_only_the_arguments_they_name():
    seen = {}

    def named(completion, answer):
        seen["named"] = (completion, answer)
        return 1.0

    def everything(**kwargs):
        seen["all"] = kwargs
        return 0.5

    def with_default(answer, extra="kept"):
        seen["default"] = extra
        return 0.0

    parser = Parser()
    rubric = Rubric(funcs=[named, everything, with_default], parser=parser)
    state = {"k": 1}
    score = await rubric.score_rollout(PROMPT, said("x"), "x", state, task="t", info={"i": 2})
    assert seen["named"] == (said("x"), "x")
    assert set(seen["all"]) == ALL_ARGS
    assert seen["all"]["state"] is state and seen["all"]["parser"] is parser
    assert (seen["all"]["task"], seen["all"]["info"]) == ("t", {"i": 2})
    assert seen["default"] == "kept"
    assert score == RolloutScore(reward=1.5, metrics={"named": 1.0, "everything": 0.5, "with_default": 0.0})


def test_function_needing_an_unknown_argument_is_a_config_error():
    def needs_judge(completion, judge):
        return 1.0

    with pytest.raises(ConfigError, match="judge"):
        Rubric(funcs=[needs_judge])


@pytest.mark.parametrize(
    "funcs, weights",
    [
        ([exact], [1.0, 2.0]),
        ([exact, lambda completion: 1.0], [1.0]),
        ([exact], [math.nan]),
        ([exact], ["1"]),
    ],
)
def test_bad_weights_are_config_errors(funcs, weights):
    with pytest.raises(ConfigError):
        Rubric(funcs=funcs, weights=weights)


def test_duplicate_names_and_non_callables_are_config_errors():
    rubric = Rubric(funcs=[exact])
    with pytest.raises(ConfigError, match="exact"):
        rubric.add_reward_func(exact)
    with pytest.raises(ConfigError):
        rubric.add_reward_func(3.0)  # type: ignore[arg-type]


async def test_sync_and_async_functions_weights_and_tracked_metrics():
    async def async_len(completion) -> float:
        await asyncio.sleep(0)
        return float(len(completion[-1]["content"]))

    def always_one(completion) -> float:
        return 1

    rubric = Rubric(funcs=[exact, async_len], weights=[2.0, 0.5], tracked_setting="kept")
    rubric.add_reward_func(always_one, weight=0.0)
    assert rubric.tracked_setting == "kept"
    assert rubric.get_reward_func_names() == ["exact", "async_len", "always_one"]
    assert rubric.get_reward_weights() == [2.0, 0.5, 0.0]
    assert rubric.get_reward_funcs()[0] is exact
    score = await rubric.score_rollout(PROMPT, said("abcd"), "abcd", {})
    assert score.reward == pytest.approx(2.0 * 1 + 0.5 * 4)
    assert score.metrics == {"exact": 1.0, "async_len": 4.0, "always_one": 1.0}


async def test_functions_of_one_rollout_run_in_order():
    def first(state):
        state.setdefault("order", []).append("first")
        return 0.0

    async def second(state):
        await asyncio.sleep(0.01)
        state["order"].append("second")
        return 0.0

    def third(state):
        state["order"].append("third")
        return float(len(state["order"]))

    state = {}
    score = await Rubric(funcs=[first, second, third]).score_rollout(PROMPT, said(""), "", state)
    assert state["order"] == ["first", "second", "third"] and score.metrics["third"] == 3.0


# -- failures -----------------------------------------------------------------------


async def test_raising_function_scores_zero_is_counted_and_logged_once(caplog):
    def flaky(answer) -> float:
        if answer == "bad":
            raise RuntimeError("boom")
        return 1.0

    rubric = Rubric(funcs=[flaky, exact], weights=[1.0, 1.0])
    with caplog.at_level(logging.WARNING, logger="verifiers"):
        scores = await rubric.score_rollouts(
            [PROMPT] * 4, [said("a"), said("b"), said("bad"), said("d")], ["a", "bad", "bad", "x"], [{}] * 4
        )
    assert scores.reward == [2.0, 0.0, 1.0, 1.0]
    assert scores.metrics == {
        "flaky": [1.0, 0.0, 0.0, 1.0],
        "exact": [1.0, 0.0, 1.0, 0.0],
        "flaky_error": [0.0, 1.0, 1.0, 0.0],
    }
    messages = [r.getMessage() for r in caplog.records if "flaky" in r.getMessage()]
    assert len(messages) == 1 and "boom" in messages[0] and "flaky_error" in messages[0]
    single = await rubric.score_rollout(PROMPT, said("bad"), "bad", {})
    assert single.metrics["flaky_error"] == 1.0 and single.reward == 1.0
    clean = await rubric.score_rollout(PROMPT, said("a"), "a", {})
    assert "flaky_error" not in clean.metrics


def test_numeric_strings_count_as_in_014():
    """0.1.4 took float() of the result: "1.0" is 1.0 (a non-number still scores 0.0)."""

    def as_text(completion):
        return "0.5"

    score = asyncio.run(Rubric(funcs=[as_text]).score_rollout(PROMPT, said("x"), "x", {}))
    assert score.reward == 0.5 and score.metrics == {"as_text": 0.5}


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, None, "one", [1.0]])
async def test_non_finite_or_non_numeric_scores_become_zero_errors(value):
    def odd(completion):
        return value

    async def odd_async(completion):
        return value

    rubric = Rubric(funcs=[odd, odd_async, exact])
    score = await rubric.score_rollout(PROMPT, said("x"), "x", {})
    assert score.reward == 1.0 and math.isfinite(score.reward)
    assert score.metrics == {
        "odd": 0.0,
        "odd_async": 0.0,
        "exact": 1.0,
        "odd_error": 1.0,
        "odd_async_error": 1.0,
    }


async def test_overflowing_weighted_sum_never_escapes_as_inf():
    def huge(completion):
        return 1e308

    score = await Rubric(funcs=[huge], weights=[10.0]).score_rollout(PROMPT, said(""), "", {})
    assert score.reward == 0.0


# -- batches --------------------------------------------------------------------------


async def test_score_rollouts_bounds_concurrency_and_keeps_order():
    in_flight = peak = 0

    async def slow_echo(answer) -> float:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.002 * (5 - int(answer)))  # later rollouts finish first
        in_flight -= 1
        return float(answer)

    rubric = Rubric(funcs=[slow_echo])
    answers = [str(i) for i in range(5)]
    scores = await rubric.score_rollouts([PROMPT] * 5, [said("")] * 5, answers, [{}] * 5, max_concurrent=2)
    assert scores.reward == [0.0, 1.0, 2.0, 3.0, 4.0] and peak == 2

    peak = 0
    await rubric.score_rollouts([PROMPT] * 5, [said("")] * 5, answers, [{}] * 5)
    assert peak == 5
    peak = 0
    sequential = Rubric(funcs=[slow_echo], parallelize_scoring=False)
    await sequential.score_rollouts([PROMPT] * 5, [said("")] * 5, answers, [{}] * 5, ["t"] * 5, [{}] * 5)
    assert peak == 1


async def test_score_rollouts_rejects_misaligned_lists_and_handles_empty_batches():
    rubric = Rubric(funcs=[exact])
    with pytest.raises(ConfigError, match="lengths"):
        await rubric.score_rollouts([PROMPT] * 2, [said("")], ["a", "b"], [{}, {}])
    assert await rubric.score_rollouts([], [], [], []) == RolloutScores(reward=[], metrics={"exact": []})


async def test_slow_sync_functions_move_off_the_event_loop(monkeypatch):
    monkeypatch.setattr(rubric_module, "INLINE_LIMIT_S", 0.02)  # generous: a loaded CI box
    threads: dict[str, list[int]] = {"cheap": [], "slow": []}

    def cheap(completion):
        threads["cheap"].append(threading.get_ident())
        return 0.0

    def slow(completion):
        threads["slow"].append(threading.get_ident())
        time.sleep(0.03)
        return 0.0

    rubric = Rubric(funcs=[cheap, slow])
    loop_thread = threading.get_ident()
    for _ in range(3):
        await rubric.score_rollout(PROMPT, said(""), "", {})
    assert threads["cheap"] == [loop_thread] * 3
    assert threads["slow"][0] == loop_thread  # first call inline, measured as slow...
    assert loop_thread not in threads["slow"][1:]  # ...then in a worker thread


# -- RubricGroup ----------------------------------------------------------------------


async def test_rubric_group_sums_rewards_and_same_named_metrics():
    def fmt(completion):
        return 0.25

    def broken(completion):
        raise ValueError("nope")

    first = Rubric(funcs=[exact, fmt], weights=[1.0, 1.0])
    second = Rubric(funcs=[fmt, broken], weights=[2.0, 1.0])
    group = RubricGroup([first, second])
    assert group.get_reward_func_names() == ["exact", "fmt", "fmt", "broken"]
    assert group.get_reward_weights() == [1.0, 1.0, 2.0, 1.0]
    assert len(group.get_reward_funcs()) == 4 and group.parser is first.parser
    one = await group.score_rollout(PROMPT, said("x"), "x", {})
    assert one.reward == pytest.approx(1.0 + 0.25 + 0.5)
    assert one.metrics == {"exact": 1.0, "fmt": 0.5, "broken": 0.0, "broken_error": 1.0}
    many = await group.score_rollouts([PROMPT] * 2, [said("x"), said("y")], ["x", "x"], [{}, {}])
    assert many.reward == pytest.approx([1.75, 0.75])
    assert many.metrics == {
        "exact": [1.0, 0.0],
        "fmt": [0.5, 0.5],
        "broken": [0.0, 0.0],
        "broken_error": [1.0, 1.0],
    }


async def test_rubric_group_scores_its_own_functions_and_rejects_empty():
    def bonus(completion):
        return 3.0

    group = RubricGroup([Rubric(funcs=[exact])])
    group.add_reward_func(bonus, weight=0.5)
    assert group.get_reward_func_names() == ["exact", "bonus"]
    score = await group.score_rollout(PROMPT, said("x"), "x", {})
    assert score.reward == 2.5 and score.metrics == {"exact": 1.0, "bonus": 3.0}
    with pytest.raises(ConfigError):
        RubricGroup([])


# -- JudgeRubric -------------------------------------------------------------------------


class FakeCompletions:
    def __init__(self, reply: str, asynchronous: bool):
        self.reply, self.calls, self.threads = reply, [], []
        if asynchronous:

            async def create(**kwargs):
                return self._answer(kwargs)

        else:

            def create(**kwargs):
                return self._answer(kwargs)

        self.create = create

    def _answer(self, kwargs):
        self.calls.append(kwargs)
        self.threads.append(threading.get_ident())
        message = SimpleNamespace(role="assistant", content=self.reply)
        return SimpleNamespace(choices=[SimpleNamespace(index=0, message=message, finish_reason="stop")])


def fake_client(reply: str = "yes", asynchronous: bool = True):
    return SimpleNamespace(chat=SimpleNamespace(completions=FakeCompletions(reply, asynchronous)))


async def judged_yes(prompt, completion, answer, state, judge) -> float:
    return 1.0 if "yes" in (await judge(prompt, completion, answer, state)).lower() else 0.0


async def judged_length(prompt, completion, answer, state, judge) -> float:
    return float(len(await judge(prompt, completion, answer, state)))


@pytest.mark.parametrize("asynchronous", [True, False])
async def test_judge_rubric_calls_the_client_once_per_rollout(asynchronous):
    client = fake_client("Yes", asynchronous)
    rubric = JudgeRubric(
        judge_client=client,
        judge_model="judge-x",
        judge_sampling_args={"temperature": 0.0, "max_tokens": None},
        parser=XMLParser(["answer"]),
        funcs=[judged_yes, judged_length],
    )
    state = {}
    score = await rubric.score_rollout(PROMPT, said("<answer>0.5</answer>"), "1/2", state)
    assert score.metrics == {"judged_yes": 1.0, "judged_length": 3.0}
    calls = client.chat.completions.calls
    assert len(calls) == 1  # the second function hit the cache in state
    assert calls[0]["model"] == "judge-x" and calls[0]["temperature"] == 0.0 and "max_tokens" not in calls[0]
    sent = calls[0]["messages"][0]["content"]
    assert "What is 1/2 as a decimal?" in sent and "1/2" in sent and "0.5" in sent and "<answer>" not in sent
    assert list(state["judge_response"].values()) == ["Yes"]
    if not asynchronous:  # a sync client's blocking call stays off the event loop
        assert client.chat.completions.threads[0] != threading.get_ident()


async def test_judge_default_client_is_created_lazily(monkeypatch):
    created = []

    def fake_async_openai():  # stands in for openai.AsyncOpenAI, which needs OPENAI_API_KEY
        created.append(fake_client("yes"))
        return created[-1]

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.setitem(sys.modules, "openai", SimpleNamespace(AsyncOpenAI=fake_async_openai))
    rubric = JudgeRubric(funcs=[judged_yes])
    assert created == []  # constructing needs no client (and no key)
    for _ in range(2):
        score = await rubric.score_rollout(PROMPT, said("x"), "y", {})
        assert score.reward == 1.0
    assert len(created) == 1 and rubric.judge_client is created[0]
    assert len(created[0].chat.completions.calls) == 2  # one per rollout (separate states)


async def test_judge_prompt_is_checked_where_upstream_fills_it():
    """Built as upstream builds it; judge() fails with upstream's KeyError and our hint."""
    rubric = JudgeRubric(judge_client=fake_client(), judge_prompt="Grade {response} by {rubric}")
    with pytest.raises(KeyError, match="^'rubric': judge_prompt"):
        await rubric.judge(PROMPT, said("x"), "y", {})


# -- ToolRubric ----------------------------------------------------------------------------


def search(query: str) -> str:
    return query


def calculate(expression: str) -> str:
    return expression


async def test_tool_rubric_counts_calls_as_tracked_metrics():
    rubric = ToolRubric(tools=[search, calculate])
    assert rubric.get_reward_func_names() == ["search_calls", "calculate_calls", "total_tool_calls"]
    assert rubric.get_reward_weights() == [0.0, 0.0, 0.0]
    completion = [
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "search"}}] * 2},
        {
            "role": "tool",
            "content": "r",
            "tool_calls": [{"function": {"name": "search"}}],
        },  # not the assistant
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                SimpleNamespace(function=SimpleNamespace(name="calculate")),
                {"function": {"name": "unknown_tool"}},
            ],
        },
        {"role": "assistant", "content": "done"},
    ]
    score = await rubric.score_rollout(PROMPT, completion, "", {})
    assert score.reward == 0.0
    assert score.metrics == {"search_calls": 2.0, "calculate_calls": 1.0, "total_tool_calls": 4.0}
    text = await rubric.score_rollout("p", "a text completion", "", {})
    assert text.metrics == {"search_calls": 0.0, "calculate_calls": 0.0, "total_tool_calls": 0.0}


def test_tool_rubric_keeps_the_01x_helpers():
    """0.1.x environments read ``oai_tools`` and call ``get_tool_call_count_func`` (0.1.4-0.1.8)."""
    rubric = ToolRubric(tools=[search, calculate])
    assert [t["function"]["name"] for t in rubric.oai_tools] == ["search", "calculate"]
    count = rubric.get_tool_call_count_func("search")
    assert count.__name__ == "search_calls"
    calls = [{"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "search"}}] * 3}]
    assert count(calls) == 3.0


# -- MathRubric ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def math_rubric_module():
    pytest.importorskip("math_verify")
    from verifiers.rubrics import math_rubric

    return math_rubric


@pytest.mark.parametrize(
    "completion, answer, expected",
    [
        ("<think>half</think> The answer is \\boxed{1/2}.", "0.5", 1.0),
        ("\\boxed{\\frac{1}{2}}", "1/2", 0.0),  # 0.1.4's default parser needs </think>
        ("<think>r</think>\\boxed{\\frac{1}{2}}", "1/2", 1.0),
        ("<think>r</think>\\boxed{\\sqrt{2}/2}", "1/\\sqrt{2}", 1.0),
        ("<think>hm</think>\\boxed{3}", "2", 0.0),
        ("<think>\\boxed{2} is my guess but I ran out of tok", "2", 0.0),  # unfinished thought
        ("<think>x</think>", "2", 0.0),
    ],
)
async def test_math_rubric_checks_equivalence(math_rubric_module, completion, answer, expected):
    rubric = math_rubric_module.MathRubric()
    score = await rubric.score_rollout(PROMPT, said(completion), answer, {})
    assert score.reward == expected
    assert score.metrics == {"correct_answer_reward_func": expected}


async def test_math_rubric_keeps_user_functions_and_works_off_the_main_thread(math_rubric_module):
    rubric = math_rubric_module.MathRubric(funcs=[exact], weights=[0.5])
    assert rubric.get_reward_func_names() == ["exact", "correct_answer_reward_func"]
    completions = [said("<think>r</think>\\boxed{0.5}"), said("<think>r</think>\\boxed{7}")]
    results = {}

    def worker():  # e.g. a trainer's background generator: no signals off the main thread
        results["scores"] = asyncio.run(
            rubric.score_rollouts([PROMPT] * 2, completions, ["1/2", "1/2"], [{}, {}])
        )

    thread = threading.Thread(target=worker)
    thread.start()
    await asyncio.to_thread(thread.join, 30)
    assert results["scores"].metrics == {"exact": [0.0, 0.0], "correct_answer_reward_func": [1.0, 0.0]}


async def test_math_rubric_time_limit_interrupts_a_runaway_check(math_rubric_module, monkeypatch, caplog):
    stopped = threading.Event()

    def never_ends(answer, response):
        try:
            while True:
                pass
        finally:
            stopped.set()

    monkeypatch.setattr(math_rubric_module, "verify_answer", never_ends)
    rubric = math_rubric_module.MathRubric(timeout_seconds=0.2)
    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger="verifiers"):
        score = await rubric.score_rollout(PROMPT, said("<think>r</think>\\boxed{1}"), "1", {})
    assert time.monotonic() - started < 2.0
    assert score.reward == 0.0 and score.metrics["correct_answer_reward_func_error"] == 1.0
    assert any("longer than 0.2" in r.getMessage() for r in caplog.records)
    assert await asyncio.to_thread(stopped.wait, 5.0)  # the busy thread was actually stopped


def test_math_rubric_without_math_verify_names_the_extra(math_rubric_module, monkeypatch):
    monkeypatch.setitem(sys.modules, "math_verify", None)  # makes `import math_verify` fail
    with pytest.raises(MissingExtraError, match="envs"):
        math_rubric_module.MathRubric()
