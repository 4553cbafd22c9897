"""``verifiers.envs.integrations`` (TextArena, reasoning-gym) and the refused environments
(issue 25, item 5). The third-party packages are replaced by tiny local fakes in
``sys.modules`` (they are not installed here), so the wrappers' logic is tested without them;
without a package, constructing its class names what to pip install."""

from __future__ import annotations

import sys
import types

import pytest

import verifiers as vf
from tests.doubles.openai_server import fake_server

pytestmark = pytest.mark.usefixtures("fresh_process_state")  # tests/envs/conftest.py


# -- a fake textarena: a three-letter Wordle ---------------------------------------------


class _GameState:
    def __init__(self):
        self.game_state = {"secret_word": "cat"}
        self.done = False
        self.game_info = {0: {"reason": ""}}


class FakeWordle:
    word_list = ["cat", "dog", "owl"]

    def __init__(self):
        self.state = _GameState()
        self.tries: list[str] = []

    def reset(self, num_players: int):
        assert num_players == 1

    def get_observation(self):
        return 0, "[GAME] Guess the 3-letter word." + "".join(f"\n[GAME] {t}: wrong" for t in self.tries)

    def step(self, guess: str):
        self.tries.append(guess)
        if guess == self.state.game_state["secret_word"]:
            self.state.done = True
            self.state.game_info[0]["reason"] = f"Solved in {len(self.tries)}."


@pytest.fixture
def fake_textarena(monkeypatch):
    made = []

    def make(env_id):
        made.append(env_id)
        return FakeWordle()

    monkeypatch.setitem(sys.modules, "textarena", types.SimpleNamespace(make=make))
    return made


async def test_wordle_style_module_plays_a_textarena_game(fake_textarena):
    from verifiers.envs.integrations.textarena_env import TextArenaEnv

    def feedback(observation: str) -> str:
        return observation.split("[GAME]")[-1].strip()

    def solved(completion) -> float:
        return 1.0 if "Solved" in completion[-1]["content"] else 0.0

    env = TextArenaEnv(
        game="Wordle-v0",
        num_train_examples=2,
        seed=3,
        feedback_fn=feedback,
        rubric=vf.Rubric(funcs=[solved]),
        max_turns=4,
    )
    assert fake_textarena == ["Wordle-v0"]
    rows = env.get_dataset()
    assert rows[0]["prompt"][-1]["content"] == "[GAME] Guess the 3-letter word." and set(
        rows["answer"]
    ) <= set(FakeWordle.word_list)

    def reply(req):
        n = sum(m["role"] == "assistant" for m in req["messages"])
        guesses = [w for w in FakeWordle.word_list if w != answer] + [answer]
        return f"<think>hm</think>\n<guess>{guesses[n]}</guess>"

    answer = rows[0]["answer"]
    with fake_server(reply) as server:
        results = await env.a_generate(rows.select([0]), server.client(), "m")
    completion = results.completion[0]
    assert completion[1]["content"].endswith(": wrong")  # feedback_fn's text of the observation
    assert completion[-1] == {"role": "user", "content": "Solved in 3."}
    assert results.state[0]["stop_condition"] == "has_final_env_response" and results.reward == [1.0]
    assert "ta_env" not in results.state[0]  # dropped by the cleanup
    assert env.ta_env.tries == []  # each rollout plays its own copy


def test_without_textarena_the_wordle_module_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "textarena", None)  # import textarena -> ModuleNotFoundError
    from verifiers.envs.integrations.textarena_env import TextArenaEnv

    with pytest.raises(vf.MissingPackageError, match="pip install textarena") as err:
        TextArenaEnv()
    assert "\n" not in str(err.value)


# -- a fake reasoning_gym --------------------------------------------------------------


class FakeRgDataset(list):
    def score_answer(self, answer, entry):
        return 1.0 if answer == entry["answer"] else 0.0


@pytest.fixture
def fake_reasoning_gym(monkeypatch):
    created = []

    def create_dataset(name, size, seed, datasets=None):
        created.append((name, size, seed, datasets))
        return FakeRgDataset(
            {"question": f"{i} + {seed} = ?", "answer": str(i + seed), "metadata": {"source_dataset": name}}
            for i in range(size)
        )

    class DatasetSpec(dict):
        def __init__(self, **kw):
            super().__init__(**kw)

    rg = types.ModuleType("reasoning_gym")
    rg.create_dataset = create_dataset
    utils = types.ModuleType("reasoning_gym.utils")
    utils.SYSTEM_PROMPTS = {"default": "Answer in <answer></answer>."}
    composite = types.ModuleType("reasoning_gym.composite")
    composite.DatasetSpec = DatasetSpec
    for name, mod in (
        ("reasoning_gym", rg),
        ("reasoning_gym.utils", utils),
        ("reasoning_gym.composite", composite),
    ):
        monkeypatch.setitem(sys.modules, name, mod)
    return created


async def test_reasoning_gym_env_generates_and_scores_with_the_package(fake_reasoning_gym):
    env = vf.ReasoningGymEnv(gym="basic_arithmetic", num_train_examples=2, num_eval_examples=1, seed=5)
    assert fake_reasoning_gym == [("basic_arithmetic", 3, 5, None)]
    rows = env.get_dataset()
    assert rows["answer"] == ["0", "1"] and rows["task"] == ["basic_arithmetic"] * 2
    assert rows[0]["prompt"][0] == {"role": "system", "content": "Answer in <answer></answer>."}
    with fake_server(lambda req: "<answer>5</answer>") as server:
        results = await env.a_generate(rows, server.client(), "m")
    assert results.reward == [1.0, 0.0]  # entry 0's answer is 5, entry 1's is 6
    vf.ReasoningGymEnv(
        gym=["a", {"name": "b", "weight": 2.0, "config": {}}], num_train_examples=1, num_eval_examples=0
    )
    assert fake_reasoning_gym[-1][0] == "composite" and fake_reasoning_gym[-1][3][1]["weight"] == 2.0


def test_without_reasoning_gym_the_env_names_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "reasoning_gym", None)
    with pytest.raises(vf.MissingPackageError, match="pip install reasoning-gym"):
        vf.ReasoningGymEnv(gym="basic_arithmetic")


# -- refused -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "needs"),
    [
        (vf.MCPEnv, "MCP servers"),
        (vf.OpenEnvEnv, "OpenEnv environment server"),
        (vf.CliAgentEnv, "hosted sandbox"),
        (vf.HarborEnv, "Harbor task containers"),
    ],
)
def test_environments_needing_outside_servers_are_refused_in_one_line(cls, needs):
    with pytest.raises(vf.ConfigError, match=needs) as err:
        cls(mcp_servers=[{"name": "fetch", "command": "uvx"}], dataset=None)
    assert "\n" not in str(err.value) and str(err.value).startswith(
        f"vf.{cls.__name__} is not supported here"
    )


def test_upstream_module_paths_import():
    from verifiers.envs.experimental import GymEnv, MCPEnv
    from verifiers.envs.experimental.harbor_env import HarborEnv
    from verifiers.envs.integrations.openenv_env import OpenEnvEnv
    from verifiers.envs.integrations.reasoninggym_env import ReasoningGymEnv

    assert (GymEnv, MCPEnv, HarborEnv, OpenEnvEnv, ReasoningGymEnv) == (
        vf.GymEnv,
        vf.MCPEnv,
        vf.HarborEnv,
        vf.OpenEnvEnv,
        vf.ReasoningGymEnv,
    )
