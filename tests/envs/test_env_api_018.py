"""The 0.1.8-0.1.12 environment API (issue 25, first part): modules written in those releases'
style (tests/fixtures/envs_01x, our own code) load with ``vf.load_environment`` and run against
the local fake OpenAI server. Nothing is downloaded.

Covered: ``@vf.stop`` / ``@vf.cleanup`` / ``@vf.teardown``; ``vf.ensure_keys``; message types;
datasets given as builders (lazy); group reward functions, ``score_group`` and monitor metrics;
``state["trajectory"]``.
"""

from __future__ import annotations

import asyncio
import copy
import importlib
import json
import pickle
import sys
from pathlib import Path

import pytest

import verifiers as vf
from tests.doubles.openai_server import fake_server

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "envs_01x"
MODULES = ("sorting_v0112", "repeater_v018", "judge_v0110", "group_v0110", "legacy_mixed", "tools_v0112")


@pytest.fixture
def envs_01x(monkeypatch):
    """Make the fixture modules importable, fresh for each test (their CALLS start empty)."""
    monkeypatch.syspath_prepend(str(FIXTURES))
    for name in MODULES:
        sys.modules.pop(name, None)
    yield
    for name in MODULES:
        sys.modules.pop(name, None)


def module(name: str):
    return importlib.import_module(name)


# -- decorators, pure -------------------------------------------------------------------


def test_hooks_are_found_by_priority_then_name_and_overrides_turn_them_off():
    from verifiers.envs.decorators import find_hooks

    class Base:
        @vf.stop
        async def b_check(self, state):
            return False

        @vf.stop(priority=10)
        async def z_early(self, state):
            return False

        @vf.stop
        async def a_check(self, state):
            return False

        @property
        def stop(self):  # a property named like the decorator is neither a hook nor evaluated
            raise AssertionError("evaluated")

    class Child(Base):
        async def b_check(self, state):  # overridden without the decorator: no longer a hook
            return True

    assert [m.__name__ for m in find_hooks(Base(), "stop")] == ["z_early", "a_check", "b_check"]
    assert [m.__name__ for m in find_hooks(Child(), "stop")] == ["z_early", "a_check"]
    assert find_hooks(Child(), "cleanup") == []


# -- helpers and message types ---------------------------------------------------------------


def test_ensure_keys_names_every_missing_variable(monkeypatch):
    monkeypatch.setenv("VF_TEST_PRESENT", "x")
    monkeypatch.delenv("VF_TEST_MISSING_A", raising=False)
    monkeypatch.setenv("VF_TEST_MISSING_B", "")  # empty counts as missing, as upstream
    vf.ensure_keys(["VF_TEST_PRESENT"])
    with pytest.raises(vf.MissingKeyError) as info:
        vf.ensure_keys(["VF_TEST_PRESENT", "VF_TEST_MISSING_A", "VF_TEST_MISSING_B"])
    assert info.value.keys == ["VF_TEST_MISSING_A", "VF_TEST_MISSING_B"]
    assert "VF_TEST_MISSING_A, VF_TEST_MISSING_B" in str(info.value)
    assert isinstance(info.value, ValueError) and isinstance(info.value, vf.ConfigError)


def test_message_types_are_chat_dicts_with_attributes():
    user = vf.UserMessage(content="hi")
    assert user == {"role": "user", "content": "hi"} and user.content == "hi" and user["role"] == "user"
    assert json.loads(json.dumps(user)) == {"role": "user", "content": "hi"}
    assert isinstance(copy.deepcopy(user), vf.UserMessage) and pickle.loads(pickle.dumps(user)) == user
    assert vf.SystemMessage(content="s")["role"] == "system"
    assistant = vf.AssistantMessage(content="a")
    assert assistant.tool_calls is None and assistant.model_dump() == {"role": "assistant", "content": "a"}
    tool = vf.ToolMessage(tool_call_id="c1", content="4")
    assert tool == {"role": "tool", "tool_call_id": "c1", "content": "4"}
    with pytest.raises(vf.ConfigError, match="tool_call_id"):
        vf.ToolMessage(content="4")
    with pytest.raises(vf.ConfigError, match="role"):
        vf.UserMessage(role="assistant", content="x")


def test_judge_module_refuses_to_load_without_its_key(envs_01x, monkeypatch):
    monkeypatch.delenv("JUDGE_API_KEY", raising=False)
    with pytest.raises(vf.MissingKeyError, match="JUDGE_API_KEY"):
        vf.load_environment("judge_v0110")


# -- datasets as builders ------------------------------------------------------------------------


def test_dataset_builders_run_lazily_once_per_split(envs_01x):
    env = vf.load_environment("repeater_v018")
    calls = module("repeater_v018").CALLS
    assert calls == {"train": 0, "eval": 0}  # loading builds nothing
    assert len(env.get_eval_dataset()) == 2 and calls == {"train": 0, "eval": 1}
    assert len(env.get_dataset(n=3)) == 3 and len(env.dataset) == 4
    env.get_dataset()
    env.get_eval_dataset()
    assert calls == {"train": 1, "eval": 1}
    assert "prompt" in env.dataset.column_names and env.build_eval_dataset() is env.eval_dataset


def test_dataset_builder_returning_none_is_refused_in_one_line():
    env = vf.SingleTurnEnv(dataset=lambda: None)
    with pytest.raises(vf.ConfigError, match="builder .* returned None"):
        env.get_dataset()


# -- @vf.stop, env_response returning messages, trajectory, cleanup/teardown ------------------


def test_sorting_0112_stops_on_its_stop_condition_and_runs_hooks(envs_01x):
    env = vf.load_environment("sorting_v0112", num_examples=2)
    mod = module("sorting_v0112")
    assert mod.CALLS["build"] == 0

    def reply(request):
        return "n0a n0b n0c" if len(request["messages"]) >= 5 else "thinking"

    with fake_server(reply=reply) as server:
        results = env.evaluate(server.client(), "fake-model", num_examples=-1)
    assert mod.CALLS["build"] == 1
    for state, completion in zip(results.state, results.completion, strict=True):
        # three model turns (info.num_turns), not max_turns=5; follow-ups are the UserMessages
        assert len(state["trajectory"]) == 3 and state["stop_condition"] == "max_turns_for_example"
        roles = [m["role"] for m in completion]
        assert roles == ["assistant", "user", "assistant", "user", "assistant"]
        assert completion[1]["content"].startswith("Add ")
    assert results.reward[0] == 1.0 and results.reward[1] == 0.0  # example 1's names differ
    assert results.metrics["num_turns"] == [3.0, 3.0]  # monitor metric, weight 0
    assert sorted(mod.CALLS["cleanup"]) == sorted(s["trajectory_id"] for s in results.state)
    assert mod.CALLS["teardown"] == 0
    env.teardown_sync()
    env.teardown_sync()
    assert mod.CALLS["teardown"] == 1


def test_trajectory_holds_one_step_per_model_call_with_its_tokens(envs_01x):
    env = vf.load_environment("repeater_v018")
    with fake_server(reply=lambda req: "alpha") as server:
        results = env.evaluate(server.client(), "fake-model", num_examples=1)
    state = results.state[0]
    steps = state["trajectory"]
    assert len(steps) == 3 and state["stop_condition"] == "all_questions_answered"
    for k, (step, turn) in enumerate(zip(steps, state["turn_tokens"], strict=True)):
        assert step["prompt"][-1]["role"] == "user" and len(step["prompt"]) == 1 + 2 * k
        assert step["completion"] == [{"role": "assistant", "content": "alpha"}]
        tokens = step["tokens"]
        assert tokens["prompt_ids"] == turn.prompt_ids and tokens["completion_ids"] == turn.completion_ids
        assert tokens["completion_logprobs"] == turn.completion_logprobs
        assert tokens["completion_mask"] == [1] * len(turn.completion_ids)
        assert step["trajectory_id"] == state["trajectory_id"]
    # the reward read parser.get_assistant_messages: one of three answers right
    assert results.reward[0] == pytest.approx(1 / 3)


def test_is_completed_override_and_stop_condition_both_end_a_rollout(envs_01x):
    env = vf.load_environment("legacy_mixed")
    with fake_server() as server:  # echoes the last user message
        results = env.evaluate(server.client(), "fake-model", num_examples=-1)
    done, going = results.state
    assert done["turn"] == 1 and done["stop_condition"] == "is_completed"
    assert going["turn"] == 4 and going["stop_condition"] == "too_many_words" and going["words"] == 3


def test_stop_condition_true_before_the_first_call_makes_no_model_call():
    from datasets import Dataset

    class Never(vf.MultiTurnEnv):
        @vf.stop
        async def already_done(self, state):
            return True

        async def env_response(self, messages, state, **kwargs):
            raise AssertionError("not reached")

    env = Never(dataset=Dataset.from_list([{"question": "q", "answer": ""}]))
    with fake_server() as server:
        results = env.evaluate(server.client(), "fake-model")
        assert server.requests == []
    assert results.state[0]["stop_condition"] == "already_done" and results.completion[0] == []


def test_final_env_response_ends_the_rollout_with_its_messages():
    from datasets import Dataset

    class Finisher(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kwargs):
            state["final_env_response"] = [vf.UserMessage(content="game over")]
            return [vf.UserMessage(content="ignored")]

    env = Finisher(dataset=Dataset.from_list([{"question": "q", "answer": ""}]), max_turns=5)
    with fake_server() as server:
        results = env.evaluate(server.client(), "fake-model")
    assert [m["content"] for m in results.completion[0]][-1] == "game over"
    assert results.state[0]["turn"] == 1 and results.state[0]["stop_condition"] == "has_final_env_response"


def test_cleanup_runs_when_the_rollout_fails_and_its_error_does_not_fail_scoring():
    from datasets import Dataset

    seen = []

    class Broken(vf.MultiTurnEnv):
        async def env_response(self, messages, state, **kwargs):
            raise RuntimeError("boom")

        @vf.cleanup
        async def first(self, state):
            raise RuntimeError("cleanup failed")

        @vf.cleanup(priority=-1)
        def second(self, state):  # sync hooks work too; runs after `first` despite its error
            seen.append(state["failure"].kind.value)

    env = Broken(dataset=Dataset.from_list([{"question": "q", "answer": ""}]), max_turns=3)
    with fake_server() as server:
        results = env.evaluate(server.client(), "fake-model")
    assert seen == ["env_response"] and results.reward == [0.0]


# -- judge (ensure_keys + JudgeRubric + builder) --------------------------------------------------


def test_judge_module_scores_with_its_judge(envs_01x, monkeypatch):
    monkeypatch.setenv("JUDGE_API_KEY", "k")

    def reply(request):
        text = request["messages"][-1]["content"]
        return "7" if text.startswith("Expected:") else "It is fine."

    with fake_server(reply=reply) as server:
        env = vf.load_environment("judge_v0110", judge_base_url=server.url)
        results = env.evaluate(server.client(), "fake-model", num_examples=2)
    assert results.reward == [pytest.approx(0.7)] * 2
    assert results.prompt[0][0] == {"role": "system", "content": "Classify, then explain."}


# -- group reward functions ----------------------------------------------------------------------


def test_group_reward_function_sees_each_example_group(envs_01x):
    env = vf.load_environment("group_v0110")
    assert env.rubric.has_group_funcs()
    counter = iter(range(100))

    def reply(request):
        return "x" * (1 + next(counter) % 3)  # lengths 1, 2, 3 within each group of 3

    with fake_server(reply=reply) as server:
        results = env.evaluate(server.client(), "fake-model", num_examples=2, rollouts_per_example=3)
    assert all(s["group_size_seen"] == 3 for s in results.state)
    for g in range(2):
        idx = range(3 * g, 3 * g + 3)
        lengths = [len(results.completion[i][-1]["content"]) for i in idx]
        expect = [1.0 if n == min(lengths) else 0.0 for n in lengths]
        assert [results.metrics["shortest_in_group"][i] for i in idx] == expect
        assert [results.reward[i] for i in idx] == [e + 0.5 for e in expect]
        assert [results.metrics["reply_chars"][i] for i in idx] == [float(n) for n in lengths]
        # as upstream: score_group writes reward and advantage (reward minus the group mean)
        rewards = [results.reward[i] for i in idx]
        for i in idx:
            assert results.state[i]["advantage"] == pytest.approx(results.reward[i] - sum(rewards) / 3)


def test_score_group_and_plural_detection_pure():
    def by_states(states) -> list[float]:
        return [float(s["v"]) for s in states]

    def annotated(**kwargs) -> list:  # a list return annotation marks a group function, too
        return [0.0] * len(kwargs["states"])

    def single(state) -> float:
        return 10.0 * state["v"]

    def broken(completions):
        return [1.0]  # wrong length: the group scores 0 and is flagged

    rubric = vf.Rubric(funcs=[by_states, single, broken], weights=[1.0, 1.0, 1.0])
    spec_groups = [spec.group for spec in rubric._specs]
    assert spec_groups == [True, False, True]
    assert vf.Rubric(funcs=[annotated])._specs[0].group
    states = [
        {
            "prompt": [],
            "completion": [],
            "answer": "",
            "task": "t",
            "info": {},
            "v": v,
            "trajectory": [{"reward": None, "advantage": None}],
        }
        for v in (1, 3)
    ]
    scores = asyncio.run(rubric.score_group(states))
    assert scores.reward == [11.0, 33.0]
    assert scores.metrics["broken_error"] == [1.0, 1.0] and scores.metrics["broken"] == [0.0, 0.0]
    assert states[0]["advantage"] == -11.0 and states[1]["trajectory"][0]["reward"] == 33.0
    assert states[0]["reward_errors"] == {"broken": "raised"}
    # the 0.1.4 API still works on one rollout: a group function sees a group of one
    one = asyncio.run(rubric.score_rollout([], [], "", {"v": 2}))
    assert one.reward == 23.0  # `broken` returns one score: right for a group of one
    # score_rollouts splits a flat batch into runs of the same example
    many = asyncio.run(
        vf.Rubric(funcs=[by_states]).score_rollouts(
            ["a", "a", "b"], ["", "", ""], ["", "", ""], [{"v": 1}, {"v": 2}, {"v": 5}]
        )
    )
    assert many.reward == [1.0, 2.0, 5.0]


def test_rubric_group_scores_group_functions_of_every_member():
    def plural(states) -> list[float]:
        return [1.0] * len(states)

    def singular(state) -> float:
        return 2.0

    group = vf.RubricGroup([vf.Rubric(funcs=[plural]), vf.Rubric(funcs=[singular])])
    assert group.has_group_funcs()
    states = [{"prompt": [], "completion": [], "answer": "", "task": "t", "info": {}} for _ in range(2)]
    scores = asyncio.run(group.score_group(states))
    assert scores.reward == [3.0, 3.0] and states[0]["metrics"] == {"plural": 1.0, "singular": 2.0}


def test_add_class_object_reaches_reward_functions():
    rubric = vf.Rubric()
    rubric.add_class_object("scale", 4.0)

    def scaled(state, scale) -> float:
        return scale * state["v"]

    rubric.add_reward_func(scaled)
    assert asyncio.run(rubric.score_rollout([], [], "", {"v": 2})).reward == 8.0


def test_0_1_4_form_env_gets_no_monitor_metrics():
    from datasets import Dataset

    class Old(vf.MultiTurnEnv):
        async def is_completed(self, messages, state, **kwargs):
            return True

        async def env_response(self, messages, state, **kwargs):
            return [], state

    env = Old(dataset=Dataset.from_list([{"question": "q", "answer": ""}]))
    assert (
        not env.later_api and isinstance(env.rubric, vf.Rubric) and not isinstance(env.rubric, vf.RubricGroup)
    )
    assert "num_turns" not in env.metric_names()


# -- RolloutInput, init_state, the 0.1.8 rollout call ------------------------------------------------


def test_init_state_from_a_rollout_input():
    from datasets import Dataset

    env = vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": "q", "answer": "a"}]))
    row: vf.RolloutInput = {
        "prompt": [{"role": "user", "content": "hi"}],
        "example_id": 7,
        "answer": "a",
        "info": '{"k": 1}',
    }
    state = asyncio.run(env.init_state(row, client=None, model="m", sampling_args={"temperature": 0.5}))
    assert state["prompt"] == row["prompt"] and state["answer"] == "a" and state["task"] == "default"
    assert state["info"] == {"k": 1} and state["input"]["info"] == {"k": 1} and state["example_id"] == 7
    assert state["model"] == "m" and state["sampling_args"] == {"temperature": 0.5}
    assert state["trajectory"] == [] and state["is_completed"] is False and state["failure"] is None
    with pytest.raises(vf.ConfigError, match="prompt"):
        asyncio.run(env.init_state({"answer": "a"}))


def test_rollout_called_the_0_1_8_way_returns_the_state(envs_01x):
    env = vf.load_environment("repeater_v018")
    row = {
        "prompt": [{"role": "user", "content": "Q?"}],
        "example_id": 0,
        "task": "sentence-repeater",
        "info": {"questions": ["a", "b"], "answers": ["x", "y"]},
    }

    async def run_all(client):
        positional = await env.rollout(row, client, "fake-model", {"temperature": 0.0})
        by_keyword = await env.rollout(input=row, client=client, model="fake-model", sampling_args=None)
        # the 0.1.4 form still returns (completion, state)
        old = await env.rollout(client, "fake-model", row["prompt"], "", "t", row["info"])
        return positional, by_keyword, old

    with fake_server(reply=lambda req: "x") as server:
        positional, by_keyword, (completion, state) = asyncio.run(run_all(server.client()))
        assert server.requests[0][1].get("temperature") == 0.0
    for st in (positional, by_keyword, state):
        assert len(st["trajectory"]) == 2 and st["stop_condition"] == "all_questions_answered"
    assert (
        positional["completion"][-1] == {"role": "assistant", "content": "x"}
        and positional["example_id"] == 0
    )
    assert completion == state["completion"]


def test_0_1_8_form_tool_env_tracks_tool_calls_once():
    from datasets import Dataset

    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    def mul(a: int, b: int) -> int:
        """Multiply two numbers."""
        return a * b

    def reply(request):
        if not any(m["role"] == "tool" for m in request["messages"]):
            return {"tool_calls": [{"name": "add", "arguments": json.dumps({"a": 1, "b": 2})}]}
        return "3"

    build = lambda: Dataset.from_list([{"question": "1+2?", "answer": "3"}])  # noqa: E731
    env = vf.ToolEnv(tools=[add], dataset=build, max_turns=4)
    env.add_tool(mul)
    with fake_server(reply=reply) as server:
        results = env.evaluate(server.client(), "fake-model")
    assert results.metrics["total_tool_calls"] == [1.0] and results.metrics["add_calls"] == [1.0]
    assert results.metrics["mul_calls"] == [0.0] and results.metrics["num_turns"] == [2.0]
    # a module that already scores with a ToolRubric does not get a second, summed, count
    own = vf.ToolEnv(tools=[add], dataset=build, rubric=vf.ToolRubric(tools=[add]))
    with fake_server(reply=reply) as server:
        results = own.evaluate(server.client(), "fake-model")
    assert results.metrics["total_tool_calls"] == [1.0]


def test_0_1_12_module_reads_messages_and_tool_calls_as_objects(envs_01x):
    env = vf.load_environment("tools_v0112")

    def reply(request):
        wanted = ["add_one"] if "'shout'" not in request["messages"][-1]["content"] else ["add_one", "shout"]
        args = {"add_one": {"x": 1}, "shout": {"text": "hi"}}
        return {
            "content": "Call me",
            "tool_calls": [{"name": n, "arguments": json.dumps(args[n])} for n in wanted],
        }

    with fake_server(reply=reply) as server:
        results = env.evaluate(server.client(), "fake-model")
    assert results.metrics["called_expected_tools"] == [1.0, 1.0]
    assert results.metrics["mentions_prompt"] == [1.0, 1.0]
    assert "called_expected_tools_error" not in results.metrics
    last = results.completion[1][-1]
    assert isinstance(last, vf.AssistantMessage) and isinstance(last, dict)
    assert [c.name for c in last.tool_calls] == ["add_one", "shout"]
    assert last["tool_calls"][0]["function"]["name"] == "add_one"  # still the OpenAI shape


def test_tool_call_type_reads_both_shapes():
    from verifiers.types import ToolCall

    upstream_form = ToolCall(id="c1", name="f", arguments={"a": 1})
    assert upstream_form == {
        "id": "c1",
        "type": "function",
        "function": {"name": "f", "arguments": '{"a": 1}'},
    }
    openai_form = ToolCall(
        {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{}"}, "index": 0}
    )
    assert (openai_form.id, openai_form.name, openai_form.arguments, openai_form["index"]) == (
        "c2",
        "g",
        "{}",
        0,
    )


def test_vf_eval_runs_a_0_1_12_module(envs_01x, tmp_path, monkeypatch, capsys):
    from verifiers.cli import eval as vf_eval

    monkeypatch.chdir(tmp_path)
    with fake_server(reply=lambda req: "thinking") as server:
        rc = vf_eval.main(["sorting_v0112", "-b", server.url, "-n", "2", "-r", "2", "-s"])
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert module("sorting_v0112").CALLS["build"] == 1 and len(module("sorting_v0112").CALLS["cleanup"]) == 4
    assert "num_turns" in out.out
