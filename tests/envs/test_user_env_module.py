"""A user's environment module written against the 0.1.x API loads and evaluates unchanged.

The module below uses only what api.md documents: a single-turn env with an
XMLParser and a two-argument reward function, a MultiTurnEnv subclass, and a
ToolEnv with two tools, combined with EnvGroup. It is loaded with
``vf.load_environment`` and evaluated against a local OpenAI-compatible server.
"""

from __future__ import annotations

import json
import sys
import textwrap

import pytest

import verifiers as vf
from tests.doubles.openai_server import fake_server

USER_MODULE = textwrap.dedent(
    '''
    import verifiers as vf
    from datasets import Dataset


    def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: first number
            b: second number
        """
        return a + b


    async def shout(text: str) -> str:
        """Upper-case a text.

        Args:
            text: what to upper-case
        """
        return text.upper()


    class CountdownEnv(vf.MultiTurnEnv):
        """The user says a number; the model must answer with the next lower one until 0."""

        def is_completed(self, messages, state, **kwargs):
            return state["turn"] >= 2

        def env_response(self, messages, state, **kwargs):
            return [{"role": "user", "content": "again"}], state


    def load_environment(num_examples: int = 4):
        qa = Dataset.from_dict({"question": ["2+2?"] * num_examples, "answer": ["4"] * num_examples})
        parser = vf.XMLParser(["think", "answer"])

        def correct(completion, answer):
            return 1.0 if parser.parse_answer(completion) == answer else 0.0

        single = vf.SingleTurnEnv(
            dataset=qa,
            system_prompt="Answer in <answer> tags.",
            parser=parser,
            rubric=vf.Rubric(funcs=[correct, parser.get_format_reward_func()], weights=[1.0, 0.2]),
        )

        def turns_used(state):
            return float(state["turn"])

        multi = CountdownEnv(dataset=qa, rubric=vf.Rubric(funcs=[turns_used], weights=[0.0]), max_turns=3)

        def used_tools(completion):
            return 1.0 if any(m.get("tool_calls") for m in completion if m["role"] == "assistant") else 0.0

        tools = vf.ToolEnv(
            dataset=qa, tools=[add, shout], rubric=vf.Rubric(funcs=[used_tools]), max_turns=3
        )
        return vf.EnvGroup([single, multi, tools], env_names=["single", "multi", "tools"])
    '''
)


@pytest.fixture()
def user_module(tmp_path, monkeypatch):
    (tmp_path / "my_user_env.py").write_text(USER_MODULE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "my-user-env"
    sys.modules.pop("my_user_env", None)


def reply(request):
    """Answer like a cooperative model: call `add` once in the tool env, then answer in tags."""
    messages = request.get("messages", [])
    if request.get("tools") and not any(m["role"] == "tool" for m in messages):
        return {"tool_calls": [{"name": "add", "arguments": json.dumps({"a": 2, "b": 2})}]}
    return "<think>\nadd\n</think>\n<answer>\n4\n</answer>"


def test_user_module_loads_and_evaluates(user_module):
    env = vf.load_environment(user_module, num_examples=2)
    assert isinstance(env, vf.EnvGroup)
    with fake_server(reply=reply) as server:
        results = env.evaluate(server.client(), "fake-model", num_examples=-1, rollouts_per_example=1)
    tasks = results.task
    assert set(tasks) == {"single", "multi", "tools"}
    by_task = {t: [i for i, x in enumerate(tasks) if x == t] for t in set(tasks)}
    # single: correct answer (1.0) + format reward (weight 0.2, perfect tags = 1.0)
    assert all(results.reward[i] == pytest.approx(1.2) for i in by_task["single"])
    assert all(results.metrics["correct"][i] == 1.0 for i in by_task["single"])
    # multi: two model turns; weight 0 -> tracked, not rewarded
    assert all(results.metrics["turns_used"][i] == 2.0 for i in by_task["multi"])
    assert all(results.reward[i] == 0.0 for i in by_task["multi"])
    # tools: the tool call ran and the rollout ended on the tagged answer
    for i in by_task["tools"]:
        assert results.metrics["used_tools"][i] == 1.0
        tool_msgs = [m for m in results.completion[i] if m["role"] == "tool"]
        assert tool_msgs and tool_msgs[0]["content"].strip() == "4"
    # metrics that don't apply to a task are 0
    assert all(results.metrics["correct"][i] == 0.0 for i in by_task["tools"])


def test_unknown_argument_of_user_module_names_accepted_ones(user_module):
    with pytest.raises(vf.EnvironmentArgsError, match="num_examples"):
        vf.load_environment(user_module, num_exampels=2)
