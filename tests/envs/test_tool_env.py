"""ToolEnv / StatefulToolEnv against the fake server, and function -> tool schema."""

from __future__ import annotations

import asyncio
import json
from typing import Literal

import pytest
from datasets import Dataset

from tests.doubles.openai_server import fake_server
from verifiers.envs.stateful_tool import StatefulToolEnv
from verifiers.envs.tool import ToolEnv
from verifiers.errors import ConfigError
from verifiers.rubrics.rubric import Rubric
from verifiers.utils.tool_utils import function_to_tool_schema

pytestmark = pytest.mark.usefixtures("fresh_process_state")  # tests/envs/conftest.py


def add(a: int, b: int = 2) -> int:
    """Add two integers.

    Args:
        a: The first number.
        b (int): The second number,
            on two lines.

    Returns:
        The sum.
    """
    return a + b


async def shout(text: str) -> str:
    """Upper-case some text."""
    await asyncio.sleep(0)
    return text.upper()


def fail(reason: str) -> str:
    """Always raises."""
    raise ValueError(f"bad: {reason}")


async def hang() -> str:
    """Never returns in time."""
    await asyncio.sleep(30)
    return "late"


def scripted(turns):
    """A model that plays ``turns`` in order (by how many assistant turns the conversation already has)."""

    def reply(req):
        done = sum(1 for m in req["messages"] if m["role"] == "assistant")
        return turns[min(done, len(turns) - 1)]

    return reply


def tool_env(tools, cls=ToolEnv, **kw):
    ds = Dataset.from_dict({"question": ["go"], "answer": ["x"]})
    return cls(tools=tools, dataset=ds, rubric=Rubric(), **kw)


def call(name, args, id_="c1"):
    return {"name": name, "arguments": args, "id": id_}


# -- schemas -------------------------------------------------------------------


def test_function_to_tool_schema():
    """0.1.4's strict schema: pydantic's JSON schema, every parameter required (tests/parity
    compares many generated functions with 0.1.4 itself)."""
    schema = function_to_tool_schema(add)
    fn = schema["function"]
    assert schema["type"] == "function" and fn["name"] == "add" and fn["strict"] is True
    assert fn["description"] == "Add two integers."  # the text before the sections
    params = fn["parameters"]
    assert params["properties"]["a"] == {"description": "The first number.", "title": "A", "type": "integer"}
    assert params["properties"]["b"] == {
        "default": 2,
        "description": "The second number,\non two lines.",
        "title": "B",
        "type": "integer",
    }
    assert params["required"] == ["a", "b"] and params["additionalProperties"] is False

    def typed(
        mode: Literal["a", "b"], xs: list[float], opt: str | None = None, m: dict[str, int] | None = None
    ):
        """Typed."""

    props = function_to_tool_schema(typed)["function"]["parameters"]["properties"]
    assert props["mode"] == {"enum": ["a", "b"], "title": "Mode", "type": "string"}
    assert props["xs"] == {"items": {"type": "number"}, "title": "Xs", "type": "array"}
    assert props["opt"] == {
        "anyOf": [{"type": "string"}, {"type": "null"}],
        "title": "Opt",
    }  # default None dropped
    assert props["m"]["anyOf"][0] == {"additionalProperties": {"type": "integer"}, "type": "object"}


# -- ToolEnv -------------------------------------------------------------------


async def test_tool_env_runs_sync_and_async_tools():
    turns = [
        {"tool_calls": [call("add", {"a": 1, "b": 5}, "c1"), call("shout", {"text": "hi"}, "c2")]},
        "done: 6 HI",
    ]
    with fake_server(scripted(turns)) as server:
        env = tool_env([add, shout])
        results = await env.a_generate(env.get_dataset(), server.client(), "m")
        first_request = server.requests[0][1]
    completion = results.completion[0]
    assert [m["role"] for m in completion] == ["assistant", "tool", "tool", "assistant"]
    assert completion[0]["tool_calls"][0]["function"] == {"name": "add", "arguments": '{"a": 1, "b": 5}'}
    assert completion[1] == {"role": "tool", "content": "6", "tool_call_id": "c1"}
    assert completion[2] == {"role": "tool", "content": "HI", "tool_call_id": "c2"}
    assert completion[3]["content"] == "done: 6 HI"
    assert results.state[0]["turn"] == 2 and results.state[0]["error"] is None
    assert [t["function"]["name"] for t in first_request["tools"]] == ["add", "shout"]


async def test_bad_tool_calls_become_error_messages():
    turns = [
        {
            "tool_calls": [
                call("nope", {}, "c1"),
                call("add", "{not json", "c2"),
                call("add", "[1, 2]", "c3"),
                call("fail", {"reason": "why"}, "c4"),
                call("add", {"zzz": 1}, "c5"),
            ]
        },
        "ok",
    ]
    with fake_server(scripted(turns)) as server:
        env = tool_env([add, fail], error_formatter=lambda e: f"ERR {type(e).__name__}: {e}")
        results = await env.a_generate(env.get_dataset(), server.client(), "m")
    tools = [m["content"] for m in results.completion[0] if m["role"] == "tool"]
    assert tools[0] == "Error: unknown tool 'nope'; available tools: add, fail"
    assert tools[1].startswith("Error: the arguments for tool 'add' are not valid JSON")
    assert tools[2] == "Error: the arguments for tool 'add' must be a JSON object, got list"
    assert tools[3] == "ERR ValueError: bad: why"
    assert tools[4].startswith("ERR TypeError:")
    assert results.state[0]["error"] is None and results.completion[0][-1]["content"] == "ok"


async def test_hanging_tool_times_out():
    turns = [{"tool_calls": [call("hang", {})]}, "gave up"]
    with fake_server(scripted(turns)) as server:
        env = tool_env([hang], tool_timeout=0.2)
        results = await asyncio.wait_for(env.a_generate(env.get_dataset(), server.client(), "m"), 5)
    tool_msg = results.completion[0][1]
    assert tool_msg["content"] == "Error: tool 'hang' timed out after 0.2s"
    assert results.completion[0][-1]["content"] == "gave up"


async def test_tool_env_stops_at_max_turns_and_per_example_tools():
    extra = {
        "type": "function",
        "function": {"name": "other", "parameters": {"type": "object", "properties": {}}},
    }
    ds = Dataset.from_dict({"question": ["a", "b"], "info": [json.dumps({"oai_tools": [extra]}), "{}"]})
    with fake_server(scripted([{"tool_calls": [call("add", {"a": 1})]}])) as server:
        env = ToolEnv(tools=[add], dataset=ds, rubric=Rubric(), max_turns=3)
        results = await env.a_generate(env.get_dataset(), server.client(), "m", max_concurrent=1)
        tool_names = [[t["function"]["name"] for t in body["tools"]] for _, body in server.requests]
    assert [s["turn"] for s in results.state] == [3, 3]
    assert tool_names[0] == ["other"] and tool_names[-1] == ["add"]


def test_tool_env_rejects_completion_type_and_duplicate_names():
    with pytest.raises(ConfigError, match="chat"):
        tool_env([add], message_type="completion")
    with pytest.raises(ConfigError, match="two tools are named 'add'"):
        tool_env([add, add])


# -- StatefulToolEnv -------------------------------------------------------------


def lookup(key: str, session: str) -> str:
    """Look up a key in the session.

    Args:
        key: What to look up.
        session: Injected by the environment.
    """
    return f"{session}:{key}"


class SessionEnv(StatefulToolEnv):
    def __init__(self, **kw):
        super().__init__(**kw)
        self.add_tool(lookup, args_to_skip=["session"])

    async def setup_state(self, state, **kw):
        state["session"] = f"s-{state['answer']}"
        return state

    def update_tool_args(self, tool_args, messages, state, **kw):
        assert kw["tool_name"] == "lookup"
        return {**tool_args, "session": state["session"]}


async def test_stateful_tool_env_injects_hidden_args():
    # The model tries to forge the hidden argument; the env's value wins.
    turns = [{"tool_calls": [call("lookup", {"key": "k", "session": "forged"})]}, "end"]
    with fake_server(scripted(turns)) as server:
        ds = Dataset.from_dict({"question": ["q"], "answer": ["7"]})
        env = SessionEnv(dataset=ds, rubric=Rubric())
        results = await env.a_generate(env.get_dataset(), server.client(), "m")
        schema = server.requests[0][1]["tools"][0]["function"]
    assert schema["name"] == "lookup"
    assert list(schema["parameters"]["properties"]) == ["key"] and schema["parameters"]["required"] == ["key"]
    assert results.completion[0][1]["content"] == "s-7:k"
    with pytest.raises(ConfigError, match="not parameters"):
        env.add_tool(add, args_to_skip=["nope"])
