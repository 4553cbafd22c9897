"""ToolEnv / StatefulToolEnv as of 0.1.5+ (issue 25, item 4): hidden arguments and
``update_tool_args(tool_name, ...)``, the schemas the model sees (``oai_tools`` / ``tool_defs``),
active tools per rollout (``state["oai_tools"]``), ``remove_tool``, ``stop_errors``, the
``no_tools_called`` stop, and error text for a tool that raises. Against the local fake server."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
from datasets import Dataset

import verifiers as vf
from tests.doubles.openai_server import fake_server

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "envs_01x"


pytestmark = pytest.mark.usefixtures("fresh_process_state")  # tests/envs/conftest.py


@pytest.fixture
def session_module(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    sys.modules.pop("session_tools_v0110", None)
    yield importlib.import_module("session_tools_v0110")
    sys.modules.pop("session_tools_v0110", None)


def call(name, args, id_="c1"):
    return {"name": name, "arguments": json.dumps(args) if not isinstance(args, str) else args, "id": id_}


def ds():
    return Dataset.from_dict({"question": ["go"], "answer": ["7"]})


def lookup(key: str, session: str) -> str:
    """Look up a key.

    Args:
        key: What to look up.
        session: Injected.
    """
    return f"{session}:{key}"


def fail(reason: str) -> str:
    """Always raises."""
    raise ValueError(f"bad: {reason}")


async def test_0_1_10_stateful_module_hides_args_sets_active_tools_and_stops_on_listed_errors(session_module):
    env = vf.load_environment("session_tools_v0110")
    assert [d.name for d in env.tool_defs] == ["open_vault", "read_note"]  # debug_dump removed
    assert list(env.tool_defs[1].parameters["properties"]) == ["key"]  # user_id, notes hidden

    def reply(request):
        if any(m["role"] == "tool" for m in request["messages"]):
            return "done"
        if "vault" in request["messages"][-1]["content"]:
            return {"tool_calls": [call("open_vault", {"code": "1234"})]}
        return {"tool_calls": [call("read_note", {"key": "a", "user_id": "forged"})]}

    with fake_server(reply) as server:
        results = env.evaluate(server.client(), "m", max_concurrent=1)
        sent = [[t["function"]["name"] for t in body["tools"]] for _, body in server.requests]
    # Rollout 1 is read-only: its setup_state took open_vault away for that rollout only.
    assert sent[0] == ["read_note"] and sent[-1] == ["open_vault", "read_note"]
    first, second = results.state
    assert results.completion[0][1]["content"] == "u1/a=apple"  # injected, the forged user_id dropped
    assert session_module.CALLS["update_tool_args"][0] == ("read_note", {"key": "a"})
    assert first["stop_condition"] == "no_tools_called" and first["error"] is None
    assert results.reward == [1.0, 0.0]
    # open_vault raised VaultLocked, listed in stop_errors: the rollout ends, failed, without a tool reply.
    assert "ToolCallError" in second["error"] and "wrong code 1234" in second["error"]
    assert [m["role"] for m in results.completion[1]] == ["assistant"]
    # 0.1.8+ monitor metrics count the tools the env has now.
    assert results.metrics["read_note_calls"] == [1.0, 0.0] and "debug_dump_calls" not in results.metrics
    assert "open_vault_calls" in results.metrics  # (a failed rollout scores 0 on every metric)


@pytest.mark.parametrize("form", ["0.1.4", "0.1.5", "0.1.5-async"])
async def test_update_tool_args_called_in_the_form_its_signature_declares(form):
    seen = []

    class Env(vf.StatefulToolEnv):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.add_tool(lookup, args_to_skip=["session"])

    if form == "0.1.4":

        def update(self, tool_args, messages, state, **kw):
            seen.append(kw.get("tool_name"))
            return {**tool_args, "session": "s" + state["answer"]}

    elif form == "0.1.5":

        def update(self, tool_name, tool_args, messages, state, **kw):
            seen.append(tool_name)
            return {**tool_args, "session": "s" + state["answer"]}

    else:

        async def update(self, tool_name, tool_args, messages, state, **kw):
            seen.append(tool_name)
            tool_args["session"] = "s" + state["answer"]  # in place, returning None

    Env.update_tool_args = update
    env = Env(dataset=ds(), rubric=vf.Rubric())
    args = await env.prepare_tool_args("lookup", {"key": "k", "session": "forged"}, [], {"answer": "7"})
    assert args == {"key": "k", "session": "s7"} and seen == ["lookup"]


def test_tool_defs_remove_tool_and_their_errors():
    env = vf.ToolEnv(tools=[lookup, fail], dataset=ds(), rubric=vf.Rubric())
    assert [d.name for d in env.tool_defs] == ["lookup", "fail"]
    assert env.tool_defs[0]["description"] == "Look up a key."
    env.remove_tool("fail")
    assert list(env.tool_map) == ["lookup"] and [t["function"]["name"] for t in env.oai_tools] == ["lookup"]
    with pytest.raises(vf.ConfigError, match="no tool is named 'fail'"):
        env.remove_tool(fail)
    env.tool_defs = [
        {"name": "other", "description": "x", "parameters": {"type": "object", "properties": {}}}
    ]
    assert env.oai_tools == [
        {
            "type": "function",
            "function": {
                "name": "other",
                "description": "x",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]


async def test_a_raising_tool_replies_with_its_error_text_and_bad_json_stops_only_when_listed():
    turns = [{"tool_calls": [call("fail", {"reason": "why"}, "c1"), call("lookup", "{oops", "c2")]}, "ok"]

    def reply(req):
        return turns[min(sum(m["role"] == "assistant" for m in req["messages"]), 1)]

    with fake_server(reply) as server:
        env = vf.ToolEnv(tools=[fail, lookup], dataset=ds(), rubric=vf.Rubric())
        results = await env.a_generate(env.get_dataset(), server.client(), "m")
        tool_texts = [m["content"] for m in results.completion[0] if m["role"] == "tool"]
        assert tool_texts[0] == "bad: why"  # 0.1.5+'s default error_formatter: the error's text
        assert tool_texts[1].startswith("Error: the arguments for tool 'lookup' are not valid JSON")
        strict = vf.ToolEnv(
            tools=[fail, lookup], dataset=ds(), rubric=vf.Rubric(), stop_errors=[json.JSONDecodeError]
        )
        results = await strict.a_generate(strict.get_dataset(), server.client(), "m")
    # fail's ValueError is not listed (still a reply); the bad JSON is, and ends the rollout.
    assert "ToolParseError" in results.state[0]["error"]


async def test_super_env_response_returns_what_the_module_form_expects():
    class Legacy(vf.ToolEnv):  # 0.1.4 form: a dataset, no 0.1.8 hooks
        async def env_response(self, messages, state, **kwargs):
            tool_messages, state = await super().env_response(messages, state, **kwargs)
            return tool_messages + [{"role": "user", "content": "legacy"}], state

    class Later(vf.ToolEnv):  # 0.1.8+ form (a dataset builder): messages only
        async def env_response(self, messages, state, **kwargs):
            tool_messages = await super().env_response(messages, state, **kwargs)
            return [*tool_messages, vf.UserMessage(content="later")]

    turns = [{"tool_calls": [call("lookup", {"key": "k", "session": "s"})]}, "end"]

    def reply(req):
        return turns[min(sum(m["role"] == "assistant" for m in req["messages"]), 1)]

    for env, note in (
        (Legacy(tools=[lookup], dataset=ds()), "legacy"),
        (Later(tools=[lookup], dataset=ds), "later"),
    ):
        with fake_server(reply) as server:
            results = await env.a_generate(env.get_dataset(), server.client(), "m")
        assert [m["content"] for m in results.completion[0][1:3]] == ["s:k", note], note
