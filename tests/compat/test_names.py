"""The names of issue 41 that environments and scripts of 0.1.5-0.1.14 use, each used as they use it
(fast tier; the release walk, test_release_walk.py, checks every other public name)."""

from __future__ import annotations

import asyncio
import inspect
import sys

import pytest

import verifiers as vf
from tests.doubles.openai_server import FakeServer


def _countdown():
    # Imported by each test, so that on code missing one name only the tests of that name fail.
    from tests.compat.envs import countdown_v0112

    return countdown_v0112


def test_message_is_a_top_level_name():
    assert vf.Message is vf.types.Message


def test_convert_func_to_tool_def_gives_a_tool_definition():
    from verifiers.utils.tool_utils import convert_func_to_oai_tool, convert_func_to_tool_def

    tool = convert_func_to_tool_def(_countdown().add)
    assert tool.name == "add" and tool.description.startswith("Add two integers")
    assert tool.parameters == convert_func_to_oai_tool(func=_countdown().add)["function"]["parameters"]
    assert set(tool.parameters["properties"]) == {"a", "b"}


def test_sandbox_state_and_the_hosted_client_refused_in_one_line():
    from verifiers.envs.sandbox_env import SandboxEnv, SandboxState

    assert set(SandboxState.__annotations__) == {"ready", "ready_wait_time", "command_execution_times"}

    class Local(SandboxEnv):
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.remove_tool(self.bash)

    from datasets import Dataset

    env = Local(dataset=Dataset.from_list([{"question": "q", "answer": "a"}]))
    with pytest.raises(vf.ConfigError) as info:
        env.sandbox_client.execute_command("id", "ls")
    assert "sandbox_client.execute_command" in str(info.value) and "\n" not in str(info.value)


def test_response_utils_read_a_response():
    from openai.types.chat import ChatCompletion

    from verifiers.utils.response_utils import parse_response_message, parse_response_tokens

    response = ChatCompletion.model_validate({
        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "hi"}}],
    })  # fmt: skip
    messages = asyncio.run(parse_response_message(response))
    assert messages[0]["role"] == "assistant" and messages[0]["content"] == "hi"
    assert asyncio.run(parse_response_tokens(response)) is None  # the server sent no token data


def test_prompt_too_long_is_a_method_of_multiturn_env():
    env = _countdown().load_environment()
    assert asyncio.run(env.prompt_too_long({"prompt_too_long": True})) is True
    assert asyncio.run(env.prompt_too_long({})) is False


@pytest.fixture(scope="module")
def server():
    with FakeServer() as s:
        yield s


def test_a_0112_module_loads_and_evaluates_in_both_styles(server):
    from tests.compat.envs import script_v014, script_v016

    env = _countdown().load_environment(max_turns=2)
    old = script_v014.run(env, server.url)  # 0.1.4: evaluate blocks and returns the results
    assert isinstance(old, vf.GenerateOutputs) and old.reward == [2.0, 2.0]
    awaited, blocking = script_v016.run(env, server.url)  # 0.1.6+: await evaluate; evaluate_sync
    assert isinstance(awaited, vf.GenerateOutputs) and awaited.reward == old.reward
    assert isinstance(blocking, vf.GenerateOutputs) and blocking.reward == old.reward


def test_evaluate_inside_a_loop_without_await_blocks_and_returns_the_results(server):
    """0.1.4 style inside a running loop (Jupyter): the call runs to completion and returns the results."""
    from openai import AsyncOpenAI

    env = _countdown().load_environment(max_turns=1)

    async def notebook_cell():
        results = env.evaluate(
            AsyncOpenAI(base_url=server.url, api_key="EMPTY"), "fake-model", num_examples=1
        )
        assert isinstance(results, vf.GenerateOutputs)
        return results.reward

    assert asyncio.run(notebook_cell()) == [1.0]


def test_awaited_evaluate_runs_in_the_callers_loop(server):
    """0.1.6+: ``await env.evaluate(...)`` is the coroutine itself (it runs in the caller's loop,
    as upstream's); calls not awaited at once ran to completion, and their results await too."""
    from openai import AsyncOpenAI

    env = _countdown().load_environment(max_turns=1)
    loops = []
    a_generate = env.a_generate

    async def recording(*args, **kwargs):
        loops.append(asyncio.get_running_loop())
        return await a_generate(*args, **kwargs)

    env.a_generate = recording

    async def main():
        client = AsyncOpenAI(base_url=server.url, api_key="EMPTY")
        first = await env.evaluate(client, "fake-model", num_examples=1)
        both = await asyncio.gather(env.a_evaluate(client, "fake-model", num_examples=1),
                                    env.generate(env.get_eval_dataset(n=1), client, "fake-model"))  # fmt: skip
        return asyncio.get_running_loop(), [first, *both]

    caller_loop, results = asyncio.run(main())
    assert [r.reward for r in results] == [[1.0], [1.0], [1.0]]
    assert all(loop is caller_loop for loop in loops)  # awaited, directly or through gather
    # asyncio.run of the call itself (a 0.1.6+ spelling without an async main)
    client = AsyncOpenAI(base_url=server.url, api_key="EMPTY")
    assert asyncio.run(env.evaluate(client, "fake-model", num_examples=1)).reward == [1.0]


def test_awaited_call_is_detected_from_the_callers_code():
    from verifiers.envs.environment import _awaited_by_caller

    seen = []

    def probe():
        seen.append(_awaited_by_caller(sys._getframe(1)))

        async def done():
            return None

        return done()

    async def caller():
        await probe()  # awaited
        await asyncio.gather(probe(), probe())  # arguments of a call
        results = probe()  # stored: 0.1.4's results
        await results
        probe().close()  # read

    asyncio.run(caller())
    assert seen == [True, True, True, False, False]


def test_sync_names_keep_the_async_signature():
    ours = inspect.signature(vf.Environment.evaluate_sync)
    assert list(ours.parameters) == list(inspect.signature(vf.Environment.a_evaluate).parameters)
