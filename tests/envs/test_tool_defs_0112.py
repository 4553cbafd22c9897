"""0.1.12's provider-agnostic tool API: ``vf.Tool``, ``tool_defs=`` on environments,
per-example ``info["tool_defs"]``, ``state["tool_defs"]``, and the OpenAI ``tools`` the
server is sent (checked against the local scripted server; nothing is downloaded)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from datasets import Dataset

import verifiers as vf
from tests.doubles.openai_server import fake_server

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "envs_01x"
SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def ds():
    return Dataset.from_list([{"prompt": [{"role": "user", "content": "hi"}], "answer": ""}])


class Echo(vf.MultiTurnEnv):
    async def env_response(self, messages, state, **kwargs):
        return [vf.UserMessage(content="again")]


# -- pure -------------------------------------------------------------------------------------


def test_tool_record_reads_as_attributes_and_sends_strict_only_when_set():
    tool = vf.Tool(name="get_weather", description="Weather.", parameters=SCHEMA)
    assert (tool.name, tool.strict, tool["parameters"]) == ("get_weather", None, SCHEMA)
    assert tool.to_oai() == {
        "type": "function",
        "function": {"name": "get_weather", "description": "Weather.", "parameters": SCHEMA},
    }
    strict = vf.Tool(name="t", description="", parameters=SCHEMA, strict=True)
    assert strict.to_oai()["function"]["strict"] is True
    assert vf.Tool.from_oai(strict.to_oai()) == strict
    with pytest.raises(vf.ConfigError, match="non-empty string 'name'"):
        vf.Tool(description="no name")
    with pytest.raises(vf.ConfigError, match="'parameters' must be a JSON-schema dict"):
        vf.Tool(name="t", parameters="x")


def test_tool_defs_argument_sets_what_the_server_is_sent_and_stays_one_list():
    env = Echo(
        dataset=ds(),
        tool_defs=[
            vf.Tool(name="a", description="A.", parameters=SCHEMA),
            {"name": "b", "description": "B.", "parameters": SCHEMA},
        ],
    )
    assert [t["function"]["name"] for t in env.oai_tools] == ["a", "b"]
    assert [t.name for t in env.tool_defs] == ["a", "b"]
    env.tool_defs.append(vf.Tool(name="c", description="", parameters=SCHEMA))  # 0.1.12 code edits in place
    env.tool_defs.remove(env.tool_defs[0])
    assert [t["function"]["name"] for t in env.oai_tools] == ["b", "c"]
    assert Echo(dataset=ds()).tool_defs is None
    with pytest.raises(vf.ConfigError, match="both oai_tools= and tool_defs="):
        Echo(dataset=ds(), tool_defs=[], oai_tools=[])
    with pytest.raises(vf.ConfigError, match="ToolEnv makes its tool schemas from tools=; tool_defs="):
        vf.ToolEnv(dataset=ds(), tools=[], tool_defs=[{"name": "x"}])


def test_per_example_tool_defs_replace_the_envs_and_empty_means_none():
    env = Echo(dataset=ds(), tool_defs=[{"name": "a", "parameters": SCHEMA}])
    assert [t["function"]["name"] for t in env.tools_for({})] == ["a"]
    own = env.tools_for({"tool_defs": '[{"name": "b", "description": null, "parameters": {}}]'})
    assert own == [{"type": "function", "function": {"name": "b", "description": "", "parameters": {}}}]
    assert env.tools_for({"tool_defs": []}) is None
    # None is what a datasets column holds for rows without tools: not given (0.1.12 sends none).
    assert [t["function"]["name"] for t in env.tools_for({"tool_defs": None})] == ["a"]
    with pytest.raises(vf.ConfigError, match=r"info\['tool_defs'\]: each entry must be"):
        env.tools_for({"tool_defs": ["b"]})


# -- components: against the scripted server --------------------------------------------------


def _weather_reply(request):
    said = sum(m["role"] == "assistant" for m in request["messages"])
    names = [t["function"]["name"] for t in request.get("tools") or []]
    if said == 0 and "get_weather" in names:
        return {"tool_calls": [{"name": "get_weather", "arguments": {"city": "Paris"}, "id": "c1"}]}
    if said == 0 and "get_time" in names:
        return {"tool_calls": [{"name": "get_time", "arguments": {}, "id": "c1"}]}
    return "It is " + request["messages"][-1]["content"]


def test_0_1_12_module_with_tool_defs_evaluates_and_the_server_sees_each_examples_tools(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    sys.modules.pop("tooldefs_v0112b", None)
    env = vf.load_environment("tooldefs_v0112b")
    with fake_server(reply=_weather_reply) as server:
        results = env.evaluate(server.client(), "fake-model", num_examples=2, rollouts_per_example=1)
        sent = [(b["messages"][0]["content"], b.get("tools")) for p, b in server.requests if "chat" in p]
    assert results.reward == [1.0, 1.0]
    weather = [tools for first, tools in sent if first.startswith("Weather")]
    clock = [tools for first, tools in sent if first.startswith("What time")]
    assert len(weather) == 2 and len(clock) == 2  # two model calls each: the tool call, the answer
    assert all(
        t
        == [
            {
                "type": "function",
                "function": {
                    "name": "get_weather",
                    "description": "Today's weather in a city.",
                    "parameters": SCHEMA,
                    "strict": True,
                },
            }
        ]
        for t in weather
    )
    assert all(
        [x["function"]["name"] for x in t] == ["get_time"] for t in clock
    )  # info["tool_defs"] replaced them
    by_prompt = {s["prompt"][0]["content"]: s for s in results.state}
    assert [t.name for t in by_prompt["What time is it?"]["tool_defs"]] == ["get_time"]
    assert by_prompt["Weather in Paris?"]["stop_condition"] == "answered"


class ActiveTools(Echo):
    async def setup_state(self, state, **kwargs):
        # 0.1.12 sets a rollout's active tools through state["tool_defs"].
        state["tool_defs"] = [t for t in state["tool_defs"] if t.name != "hidden"]
        return state


async def test_setup_state_changing_state_tool_defs_changes_the_tools_sent():
    env = ActiveTools(
        dataset=ds(),
        max_turns=2,
        tool_defs=[{"name": "shown", "parameters": SCHEMA}, {"name": "hidden", "parameters": SCHEMA}],
    )
    with fake_server(reply=lambda req: "ok") as server:
        state = await env.rollout(
            {"prompt": [{"role": "user", "content": "hi"}]}, server.client(), "fake-model"
        )
        sent = [[t["function"]["name"] for t in b["tools"]] for p, b in server.requests if "chat" in p]
    assert sent == [["shown"], ["shown"]]
    assert [t["function"]["name"] for t in state["oai_tools"]] == ["shown"]
    assert [t["function"]["name"] for t in env.oai_tools] == [
        "shown",
        "hidden",
    ]  # the env's own list is unchanged
