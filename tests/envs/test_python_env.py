"""``vf.PythonEnv`` on the local sandbox and ``vf.SandboxEnv``'s refusals (issue 25, item 5).

A module in the style of upstream's math_python (tests/fixtures/envs_01x/python_tools_v0112.py)
runs against the fake server: the model sees one ``python(code)`` tool, and a variable set in
one call is there in the next. Each call starts a sandboxed process (~0.2 s)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

import pytest
from datasets import Dataset

import verifiers as vf
from tests.doubles.openai_server import fake_server
from verifiers.envs.python_env import format_python_reply

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "envs_01x"


pytestmark = pytest.mark.usefixtures("fresh_process_state")  # tests/envs/conftest.py


@pytest.fixture
def python_module(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    sys.modules.pop("python_tools_v0112", None)
    yield importlib.import_module("python_tools_v0112")
    sys.modules.pop("python_tools_v0112", None)


def python_call(code, id_):
    return {"tool_calls": [{"name": "python", "arguments": json.dumps({"code": code}), "id": id_}]}


def by_turn(turns):
    def reply(req):
        return turns[min(sum(m["role"] == "assistant" for m in req["messages"]), len(turns) - 1)]

    return reply


def ds():
    return Dataset.from_dict({"question": ["q"], "answer": ["a"]})


def test_format_python_reply_as_upstream_writes_it():
    assert (
        format_python_reply({"status": "ok", "stdout": "hi\n", "stderr": "", "result": "3"}, 2)
        == "hi\nOut[2]: 3"
    )
    assert (
        format_python_reply({"status": "ok", "stdout": "", "stderr": "w\n", "result": None}, 1)
        == "stderr:\nw"
    )
    assert (
        format_python_reply({"status": "error", "stdout": "", "stderr": "", "result": "Trace\n"}, 1)
        == "Trace"
    )
    assert (
        format_python_reply({"status": "ok", "stdout": "", "stderr": "", "result": None}, 1) == "(no output)"
    )


async def test_math_python_module_keeps_variables_across_calls(python_module):
    env = vf.load_environment("python_tools_v0112")
    turns = [
        python_call("import numpy as np\nx = int(np.int64(6)) * 7", "c1"),
        python_call("print('x is', x)\nx + 1", "c2"),
        python_call("y = 1 / 0", "c3"),
        "The answer is \\boxed{43}",
    ]
    with fake_server(by_turn(turns)) as server:
        results = await env.a_generate(env.get_dataset(), server.client(), "m")
        tools = server.requests[0][1]["tools"]
    assert [t["function"]["name"] for t in tools] == ["python"]
    assert list(tools[0]["function"]["parameters"]["properties"]) == ["code"]  # the rest is hidden
    replies = [m["content"] for m in results.completion[0] if m["role"] == "tool"]
    assert replies[0] == "(no output)"
    assert replies[1] == "x is 42\nOut[2]: 43"
    assert replies[2].startswith("Traceback") and 'File "<cell>", line 1' in replies[2]
    assert replies[2].rstrip().endswith("ZeroDivisionError: division by zero")
    state = results.state[0]
    assert results.reward == [1.0] and state["error"] is None
    assert state["python_state"]["execution_count"] == 3
    assert len(state["sandbox_state"]["command_execution_times"]) == 3
    for metric in (
        "sandbox_ready_wait_time",
        "sandbox_command_execution_time",
        "python_ready_wait_time",
        "python_calls",
    ):
        assert metric in results.metrics


async def test_python_call_past_its_time_limit_says_so_and_the_next_call_still_runs():
    env = vf.PythonEnv(
        dataset=ds(), rubric=vf.Rubric(), timeout_per_command_seconds=1, pip_install_packages=""
    )
    state = await env.setup_state({"answer": "a", "info": {}})
    args = env.update_tool_args("python", {"code": "while True: pass"}, [], state)
    assert await env.python(**args) == "Error: Command timed out after 1s"
    args = env.update_tool_args("python", {"code": "'still here'"}, [], state)
    assert await env.python(**args) == "Out[1]: 'still here'"


def test_python_env_names_packages_this_interpreter_lacks(caplog):
    vf.PythonEnv(dataset=ds(), pip_install_packages="numpy no-such-package-xyz==1.0")
    assert "no-such-package-xyz not installed" in caplog.text and "numpy" not in caplog.text.split("):")[-1]


async def test_sandbox_env_needing_a_hosted_sandbox_is_refused_in_one_line():
    with pytest.raises(vf.ConfigError, match="hosted sandbox") as err:
        vf.SandboxEnv(dataset=ds())
    assert "\n" not in str(err.value) and "vf.PythonEnv" in str(err.value)

    class SweEnv(vf.SandboxEnv):
        pass

    with pytest.raises(vf.ConfigError, match="docker_image='swe-bench:latest'"):
        SweEnv(dataset=ds(), docker_image="swe-bench:latest")

    # A subclass that keeps the bash tool: refused when its first rollout opens the sandbox.
    env = SweEnv(dataset=ds(), rubric=vf.Rubric())
    with fake_server(by_turn(["hi"])) as server:
        results = await env.a_generate(env.get_dataset(), server.client(), "m")
    assert "offers the bash tool" in results.state[0]["error"]
