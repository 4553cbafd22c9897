"""The 0.1.8+ turn-loop hooks a module may override: ``get_prompt_messages`` (what each model
call is sent: a non-linear history), ``render_completion`` and ``add_trajectory_step`` are
called; ``run_rollout`` / ``run_group`` overrides, which this package would never call, are
refused at construction in one line."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from datasets import Dataset

import verifiers as vf
from tests.doubles.openai_server import fake_server
from verifiers.tokenization.assembly import process_rollouts

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "envs_01x"


def ds():
    return Dataset.from_list([{"prompt": [{"role": "user", "content": "go"}], "answer": ""}])


def _say_the_number(request):
    """The scripted model: says the last number the last message asks for."""
    return re.findall(r"\d+", request["messages"][-1]["content"])[-1]


def test_summary_module_sends_its_own_prompts_and_renders_its_completion(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    sys.modules.pop("summary_v0112b", None)
    env = vf.load_environment("summary_v0112b")
    assert env.later_api  # the hooks are 0.1.8+ API: num_turns is tracked
    with fake_server(reply=_say_the_number) as server:
        results = env.evaluate(server.client(), "fake-model", num_examples=1, rollouts_per_example=1)
        sent = [b["messages"] for p, b in server.requests if "chat" in p]
    # get_prompt_messages decided every call's messages: a summary, not the whole history
    assert [[m["content"] for m in msgs] for msgs in sent] == [
        ["Count: say 1."],
        ["So far: 1", "Say 2."],
        ["So far: 1, 2", "Say 3."],
    ]
    state = results.state[0]
    assert [m["content"] for m in results.completion[0]] == ["1", "2", "3"]  # render_completion's
    assert results.reward == [1.0] and results.metrics["num_turns"] == [3.0]
    assert [step["extras"]["turn"] for step in state["trajectory"]] == [1, 2, 3]  # add_trajectory_step's
    assert [[m["content"] for m in step["prompt"]] for step in state["trajectory"]] == [
        [m["content"] for m in msgs] for msgs in sent
    ]
    assert state["stop_condition"] == "max_turns_reached"
    # Trained one sample per step, from the server's own token ids (no tokenizer given).
    out = process_rollouts([state], [1.0], None)
    assert out.metrics["samples"] == 3 and out.metrics["trajectory_splits"] == 1
    assert out.completion_ids == [step["tokens"]["completion_ids"] for step in state["trajectory"]]


class FinalInPrompt(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        state["final_env_response"] = [vf.UserMessage(content="done")]
        return state["final_env_response"]

    async def get_prompt_messages(self, state):
        return await super().get_prompt_messages(state)


async def test_default_get_prompt_messages_calls_env_response_and_final_response_ends_it():
    env = FinalInPrompt(dataset=ds(), max_turns=5)
    with fake_server(reply=lambda req: "hi") as server:
        state = await env.rollout(
            {"prompt": [{"role": "user", "content": "go"}]}, server.client(), "fake-model"
        )
        calls = [p for p, b in server.requests if "chat" in p]
    assert len(calls) == 1 and state["stop_condition"] == "has_final_env_response"
    assert [(m["role"], m["content"]) for m in state["completion"]] == [("assistant", "hi"), ("user", "done")]


class StepRewards(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        return [vf.UserMessage(content="more")]

    async def add_trajectory_step(self, state, trajectory_step):
        trajectory_step["reward"] = 0.25 * (len(state["trajectory"]) + 1)
        state["trajectory"].append(trajectory_step)


async def test_add_trajectory_step_override_sets_step_rewards_that_scoring_keeps():
    env = StepRewards(dataset=ds(), max_turns=2, rubric=vf.Rubric(funcs=[lambda completion: 1.0]))
    assert env.later_api
    with fake_server(reply=lambda req: "x") as server:
        state = await env.rollout(
            {"prompt": [{"role": "user", "content": "go"}]}, server.client(), "fake-model"
        )
    assert [s["reward"] for s in state["trajectory"]] == [0.25, 0.5]
    # the default linear loop still ran: the completion holds both turns and the env reply
    assert [m["content"] for m in state["completion"]] == ["x", "more", "x"]
    await env.rubric.score_group([state])
    assert state["reward"] == 1.0 and [s["reward"] for s in state["trajectory"]] == [0.25, 0.5]


@pytest.mark.parametrize("method", ["run_rollout", "run_group"])
def test_run_rollout_and_run_group_overrides_are_refused_in_one_line(method):
    async def override(self, *args, **kwargs):
        return None

    cls = type("Custom", (vf.MultiTurnEnv,), {method: override, "env_response": override})
    with pytest.raises(vf.ConfigError) as err:
        cls(dataset=ds())
    text = str(err.value)
    assert f"Custom.{method}() would never be called" in text and "\n" not in text.strip()
