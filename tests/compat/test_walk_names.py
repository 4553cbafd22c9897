"""Names of 0.1.4-0.1.14 that the release walk found missing and that now resolve (each used as that
release's code uses it), and a few of those refused by name (one line, with the reason)."""

from __future__ import annotations

import asyncio
import importlib
import sys
import textwrap
import uuid

import pytest

import verifiers as vf
from verifiers.compat.refused import RefusedMemberError, RefusedNameError
from verifiers.errors import ConfigError


def _env(**kw):
    from datasets import Dataset

    return vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": "q", "answer": "a"}]), **kw)


def _exact(completion, answer) -> float:
    text = completion if isinstance(completion, str) else completion[-1]["content"]
    return float(text == answer)


def test_score_rollout_in_the_0_1_8_form_writes_the_state_and_holds_the_semaphore():
    rubric = vf.Rubric(funcs=[_exact], weights=[2.0])
    state = {"prompt": "q", "completion": "a", "answer": "a", "task": "default", "info": {}}
    sem = asyncio.Semaphore(1)

    async def run():
        await rubric.score_rollout(state, sem)
        return sem.locked()

    assert asyncio.run(run()) is False  # released again
    assert state["reward"] == 2.0 and state["metrics"] == {"_exact": 1.0}
    # 0.1.4's form returns the score, as before
    assert asyncio.run(rubric.score_rollout("q", "b", "a", {})).reward == 0.0
    # a group of rubrics and an env group's rubric take it too
    group = vf.RubricGroup([rubric, vf.Rubric(funcs=[_exact])])
    state2 = dict(state)
    asyncio.run(group.score_rollout(state2))
    assert state2["reward"] == 3.0


def test_score_group_takes_0_1_8s_semaphore_and_funcs_weights_read_the_rubric():
    rubric = vf.Rubric(funcs=[_exact], weights=[0.5])
    states = [{"prompt": "q", "completion": c, "answer": "a"} for c in ("a", "b")]
    scores = asyncio.run(rubric.score_group(states, asyncio.Semaphore(2)))
    assert scores.reward == [0.5, 0.0] and [s["reward"] for s in states] == [0.5, 0.0]
    assert rubric.funcs == [_exact] and rubric.weights == [0.5]


def test_environment_0_1_x_members():
    env = _env(rubric=vf.Rubric(funcs=[_exact], weights=[3.0]))
    assert env.get_reward_funcs() == [_exact] and env.get_reward_weights() == [3.0]
    state = {"x": 1}
    assert asyncio.run(vf.Environment.setup_state(env, state)) is state
    assert asyncio.run(env.has_error({"error": None})) is False
    assert asyncio.run(env.has_error({"error": "boom"})) is True
    assert asyncio.run(env.has_final_env_response({"final_env_response": [{"role": "user", "content": "x"}]}))
    with pytest.raises(RefusedMemberError) as info:
        env.start_server()
    assert "environment server" in str(info.value) and "\n" not in str(info.value)
    assert not hasattr(env, "max_seq_len")


def test_load_environment_records_its_id_and_arguments(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    name = f"vf_walk_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(
        textwrap.dedent(
            """
            import verifiers as vf
            def load_environment(system_prompt="x"):
                from datasets import Dataset
                return vf.SingleTurnEnv(dataset=Dataset.from_list([{"question": "q", "answer": "a"}]),
                                        system_prompt=system_prompt)
            """
        )
    )
    try:
        env = vf.load_environment(name, system_prompt="brief")
        assert env.env_id == name and env.env_args == {"system_prompt": "brief"}
        assert _env().env_id is None and _env().env_args == {}
    finally:
        sys.modules.pop(name, None)


def test_generate_inputs_example_ids_reach_the_states_and_outputs():
    from verifiers.envs.dataset_format import inputs_to_rows

    inputs = vf.GenerateInputs(prompt=[[{"role": "user", "content": "q"}]] * 2, example_id=[7, 9])
    rows = inputs_to_rows(inputs, lambda d, _: d, lambda q: [{"role": "user", "content": q}])
    assert [r["example_id"] for r in rows] == [7, 9]
    out = vf.GenerateOutputs(
        prompt=["p"],
        completion=["c"],
        answer=["a"],
        state=[{"example_id": 7}],
        info=[{}],
        task=["t"],
        reward=[1.0],
    )
    assert out.example_id == [7] and out.metadata == {}
    given = vf.GenerateOutputs(
        prompt=[],
        completion=[],
        answer=[],
        state=[],
        info=[],
        task=[],
        reward=[],
        example_id=[],
        metadata={"m": 1},
    )
    assert given.metadata == {"m": 1}


def test_vllm_client_0_1_4_arguments():
    from tests.doubles.vllm_server import free_port
    from verifiers.errors import ServerUnreachableError
    from verifiers.inference.client.vllm_client import VLLMClient

    # group_port: the NCCL group's port when the sync goes over NCCL (a free one when not given)
    seen = []
    import verifiers.inference.client.nccl_update as nccl_update

    class Channel:
        def __init__(self, client, address, port):
            seen.append(port)

    client = VLLMClient(port=8000, group_port=51216)
    client.health = lambda: {}
    real, nccl_update.NcclChannel = nccl_update.NcclChannel, Channel
    try:
        client.init_nccl()
        client.init_nccl(master_port=40000)
    finally:
        nccl_update.NcclChannel = real
    assert seen == [51216, 40000]
    with pytest.raises(ServerUnreachableError):  # waited (briefly) for a server, as 0.1.4 did
        VLLMClient(port=free_port(), connection_timeout=0.5)
    VLLMClient(port=free_port())  # without it, no wait


def test_cleanup_stage_other_than_rollout_is_refused_in_one_line():
    @vf.cleanup(stage="rollout")
    async def fine(self, state):
        return None

    with pytest.raises(ConfigError) as info:
        vf.cleanup(stage="group")
    assert "stage='group'" in str(info.value) and "\n" not in str(info.value)


def test_later_types_and_hook_types_resolve():
    from verifiers.envs.environment import EnvironmentTeardown, RolloutCleanup, StopCondition  # noqa: F401
    from verifiers.envs.experimental.gym_env import ResetOut, StepOut, StepResetEnv  # noqa: F401
    from verifiers.types import ChatMessages, GroupRewardFunc, RolloutTiming, TokenUsage  # noqa: F401

    assert TokenUsage(input_tokens=1, output_tokens=2) == {"input_tokens": 1, "output_tokens": 2}
    assert vf.MaybeThinkParser is importlib.import_module("verifiers.parsers").MaybeThinkParser


@pytest.mark.parametrize(
    ("statement", "reason"),
    [
        ("from verifiers import Taskset", "task/harness API"),
        ("from verifiers import OpenAIChatCompletionsClient", "model-client layer"),
        ("from verifiers.types import EvalConfig", "vf-eval"),
        (
            "from verifiers.envs.experimental.composable.tasksets.swe import SWETaskSet",
            "composable task sets",
        ),
        ("from verifiers.envs.experimental.rlm_env import RLMEnv", "RLM, OpenCode"),
        ("from verifiers.envs.experimental.mcp_env import MCPServerConfig", "MCP servers"),
        ("from verifiers.envs.sandbox_env import SandboxCreationError", "hosted sandbox"),
    ],
)
def test_refused_names_fail_at_import_in_one_line(statement, reason):
    with pytest.raises(RefusedNameError) as info:
        exec(statement, {})
    assert reason in str(info.value) and "\n" not in str(info.value)


class _GuessV018(vf.MultiTurnEnv):
    """A 0.1.8+-style game: is_completed(state) extends the base with super().is_completed(state)."""

    async def is_completed(self, state, **kwargs):
        return await super().is_completed(state) or state["turn"] >= 2

    async def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": "again"}]


class _ToolV018(vf.ToolEnv):
    async def is_completed(self, state, **kwargs):
        state["asked_in_state_form"] = True
        return await super().is_completed(state)


def _add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def test_an_is_completed_override_in_the_0_1_8_form_is_called_so_and_reaches_the_base():
    from datasets import Dataset
    from openai import AsyncOpenAI

    from tests.doubles.openai_server import FakeServer

    data = Dataset.from_list([{"question": "q", "answer": "a"}])
    game = _GuessV018(dataset=data, max_turns=5)
    tools = _ToolV018(dataset=data, tools=[_add], max_turns=5)
    assert game.later_api  # an override written for 0.1.8+ puts the module in that form
    with FakeServer() as server:
        client = AsyncOpenAI(base_url=server.url, api_key="EMPTY")
        state = game.evaluate(client, "fake-model", num_examples=1, rollouts_per_example=1).state[0]
        assert state["turn"] == 2 and state.get("failure") is None
        out = tools.evaluate(client, "fake-model", num_examples=1, rollouts_per_example=1).state[0]
        # the fake server's reply has no tool calls: ToolEnv's own check, reached from the state form
        assert out["asked_in_state_form"] and out["stop_condition"] == "no_tools_called" and out["turn"] == 1
    # and the base's state form on its own: max_turns reached, stop conditions
    assert asyncio.run(vf.MultiTurnEnv.is_completed(game, {"turn": 5})) is True
    assert asyncio.run(vf.MultiTurnEnv.is_completed(game, {"turn": 1})) is False
