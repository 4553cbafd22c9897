"""``vf.GymEnv`` (issue 25, item 5) with a tiny local Gym-style class (no gymnasium needed):
rows from ``reset(seed)``, one ``step`` per model reply, step rewards summed, ``close()`` run."""

from __future__ import annotations

import pytest

import verifiers as vf
from tests.doubles.openai_server import fake_server
from verifiers.envs.gym import normalize_reset, normalize_step

pytestmark = pytest.mark.usefixtures("fresh_process_state")  # tests/envs/conftest.py


class Counter:
    """Reach ``target`` (seed-dependent) by adding the numbers you say; +1 reward per step on target."""

    closed = 0

    def __init__(self, start: int = 0, old_api: bool = False):
        self.start, self.old_api = start, old_api

    def reset(self, seed: int):
        self.value, self.target = self.start, 2 + seed % 2
        return f"at {self.value}, reach {self.target}", {"seed": seed}

    def step(self, action: int):
        self.value += action
        done = self.value >= self.target
        reward = 1.0 if self.value == self.target else -0.5
        obs = f"at {self.value}"
        return (
            (obs, reward, done, {"v": self.value})
            if self.old_api
            else (obs, reward, done, False, {"v": self.value})
        )

    def close(self):
        Counter.closed += 1


def test_normalize_reset_and_step_read_both_gym_apis():
    assert normalize_reset(("o", {"a": 1})) == ("o", {"a": 1}) and normalize_reset("o") == ("o", {})
    assert normalize_step(("o", 1, True, {"i": 1})) == ("o", 1.0, True, False, {"i": 1})
    assert normalize_step(("o", 0, False, True, {})) == ("o", 0.0, False, True, {})
    with pytest.raises(vf.ConfigError, match="expected"):
        normalize_step(("o", 1))


@pytest.mark.parametrize("old_api", [False, True])
async def test_gym_env_plays_episodes_and_sums_step_rewards(old_api):
    Counter.closed = 0
    env = vf.GymEnv(
        env_cls=Counter,
        env_kwargs={"old_api": old_api},
        action_parser=int,
        num_train_episodes=2,
        num_eval_episodes=1,
        seed=10,
    )
    assert env.get_dataset()["answer"] == ["10", "11"] and env.get_eval_dataset()["answer"] == ["12"]
    assert env.get_dataset()[0]["prompt"][-1]["content"] == "at 0, reach 2"
    assert Counter.closed == 1  # the instance that made the rows

    def reply(req):
        if "Episode already ended" in req["messages"][-1]["content"]:
            return "bye"
        return "1" if "reach 3" in req["messages"][0]["content"] else "2"

    with fake_server(reply) as server:
        results = await env.a_generate(env.get_dataset(), server.client(), "m")
    # Seed 10: target 2, "2" hits it in one step (+1). Seed 11: target 3, three steps of "1": -0.5, -0.5, +1.
    assert results.reward == [1.0, 0.0]
    steps = results.state[1]["trajectory"]
    assert [s["reward"] for s in steps[:3]] == [-0.5, -0.5, 1.0]
    assert steps[2]["extras"]["gym_info"] == {"v": 3}
    assert results.state[1]["stop_condition"] == "is_done"
    assert results.completion[0][1]["content"] == "at 2\nEpisode already ended."
    assert Counter.closed == 3 and "gym_env" not in results.state[0]


async def test_a_reply_that_is_no_action_ends_the_episode_unrewarded():
    env = vf.GymEnv(env_cls=Counter, action_parser=int, num_train_episodes=1, num_eval_episodes=0)
    with fake_server(lambda req: "two") as server:
        results = await env.a_generate(env.get_dataset(), server.client(), "m")
    assert results.completion[0][1]["content"].startswith("Action Parsing Error: invalid literal")
    assert results.reward == [0.0] and results.state[0]["stop_condition"] == "is_done"


def test_gym_env_refuses_no_episodes():
    with pytest.raises(vf.ConfigError, match="needs episodes"):
        vf.GymEnv(env_cls=Counter, num_train_episodes=0, num_eval_episodes=0)


async def test_gym_env_runs_a_real_gymnasium_environment():
    gymnasium = pytest.importorskip("gymnasium")
    from gymnasium.envs.toy_text.frozen_lake import FrozenLakeEnv

    env = vf.GymEnv(
        env_cls=FrozenLakeEnv,
        env_kwargs={"map_name": "4x4", "is_slippery": False},
        action_parser=lambda text: {"left": 0, "down": 1, "right": 2, "up": 3}[text.strip()],
        obs_to_text=lambda obs: f"cell {obs}",
        num_train_episodes=1,
        num_eval_episodes=0,
    )
    # The 4x4 map's safe path: down, down, right, right, down, right reaches the goal (reward 1).
    moves = ["down", "down", "right", "right", "down", "right", "bye"]

    def reply(req):
        return moves[min(sum(m["role"] == "assistant" for m in req["messages"]), len(moves) - 1)]

    with fake_server(reply) as server:
        results = await env.a_generate(env.get_dataset(), server.client(), "m")
    assert gymnasium.__version__ and env.get_dataset()[0]["prompt"][-1]["content"] == "cell 0"
    assert results.reward == [1.0] and results.state[0]["stop_condition"] == "is_done"
    assert results.completion[0][-2]["content"] == "cell 15\nEpisode already ended."
