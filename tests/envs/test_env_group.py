"""EnvGroup: dataset concatenation, routing by task, per-env rubrics, metric filling."""

from __future__ import annotations

import pytest
from datasets import Dataset

from tests.doubles.configs import TRAINER_TABLES
from tests.doubles.openai_server import fake_server
from verifiers.envs.group import EnvGroup
from verifiers.envs.singleturn import SingleTurnEnv
from verifiers.errors import ConfigError
from verifiers.rubrics.rubric import Rubric

pytestmark = pytest.mark.usefixtures("fresh_process_state")  # tests/envs/conftest.py


def says_math(completion) -> float:
    return 1.0 if "MATH" in completion[-1]["content"] else 0.0


def says_code(completion) -> float:
    return 1.0 if "CODE" in completion[-1]["content"] else 0.0


def reply(req):
    """Answers in the style its system prompt asks for."""
    return f"{req['messages'][0]['content']} answer"


def member(style: str, n: int, info: dict, **kw) -> SingleTurnEnv:
    ds = Dataset.from_dict({"question": [f"{style}{i}" for i in range(n)], "info": [info] * n})
    func = says_math if style == "MATH" else says_code
    return SingleTurnEnv(dataset=ds, system_prompt=style, rubric=Rubric(funcs=[func]), **kw)


def test_group_dataset_concatenates_with_task_names():
    math = member("MATH", 2, {"level": 1}, eval_dataset=Dataset.from_dict({"question": ["e"]}))
    code = member("CODE", 3, {"lang": "py"})
    group = EnvGroup([math, code])
    assert group.dataset["task"] == ["env_0"] * 2 + ["env_1"] * 3
    assert group.dataset["id"] == list(range(5))
    # 0.1.4: a member without an eval split contributes its training split to the group's.
    assert group.eval_dataset["task"] == ["env_0"] + ["env_1"] * 3
    named = EnvGroup([math, code], env_names=["math", "code"])
    assert set(named.dataset["task"]) == {"math", "code"}
    with pytest.raises(ConfigError, match="2 envs but 1 env_names"):
        EnvGroup([math, code], env_names=["x"])
    with pytest.raises(ConfigError, match="mix chat and completion"):
        EnvGroup(
            [math, SingleTurnEnv(dataset=Dataset.from_dict({"question": ["q"]}), message_type="completion")]
        )


async def test_group_routes_rollouts_and_fills_metrics():
    group = EnvGroup(
        [member("MATH", 2, {"level": 1}), member("CODE", 2, {"lang": "py"})], env_names=["m", "c"]
    )
    with fake_server(reply) as server:
        results = await group.a_generate(group.get_dataset(), server.client(), "model")
        systems = [body["messages"][0]["content"] for _, body in server.requests]
    assert sorted(systems) == ["CODE", "CODE", "MATH", "MATH"]  # each row ran on its own env
    assert results.task == ["m", "m", "c", "c"]
    assert results.reward == [1.0] * 4
    assert results.metrics == {"says_math": [1.0, 1.0, 0.0, 0.0], "says_code": [0.0, 0.0, 1.0, 1.0]}
    assert results.info[0] == {"level": 1} and results.info[2] == {"lang": "py"}


async def test_group_only_one_task_still_reports_every_metric_and_unknown_task_fails():
    group = EnvGroup([member("MATH", 1, {}), member("CODE", 1, {})])
    inputs = {"prompt": [[{"role": "system", "content": "CODE"}], [{"role": "user", "content": "x"}]]}
    inputs["task"] = ["env_1", "nope"]
    with fake_server(reply) as server:
        results = await group.a_generate(inputs, server.client(), "model")
    assert results.metrics["says_math"] == [0.0, 0.0] and results.metrics["says_code"] == [1.0, 0.0]
    assert "no environment in this EnvGroup handles task 'nope'" in results.state[1]["error"]


# -- weighted training mixture ------------------------------------------------------------------


def plain(name: str, n: int) -> SingleTurnEnv:
    return SingleTurnEnv(dataset=Dataset.from_dict({"question": [f"{name}{i}" for i in range(n)]}))


def test_weighted_group_draws_rows_by_weight_not_by_size():
    from verifiers.training.generation.producer import PromptStream

    # a: 10 rows, b: 300 rows; weights 3:1 turn the size ratio around.
    group = EnvGroup([plain("a", 10), plain("b", 300)], env_names=["a", "b"], weights=[3, 1.0], seed=0)
    data = group.get_dataset()
    tasks = list(data["task"])
    assert len(tasks) == 310 and tasks.count("a") == 233 and tasks.count("b") == 77  # 232.5 : 77.5
    assert group.task_shares() == {"a": 233 / 310, "b": 77 / 310}
    a_prompts = [p[-1]["content"] for t, p in zip(tasks, data["prompt"], strict=True) if t == "a"]
    assert set(a_prompts) == {f"a{i}" for i in range(10)}  # every a row, repeated to reach its share
    # Every prefix follows the weights (the rows are interleaved, not grouped by env).
    assert all(abs(tasks[:k].count("a") - 0.75 * k) <= 1.5 for k in range(1, 311))
    # What the trainer reads: 5000 draws through its PromptStream (shuffled epochs).
    stream = PromptStream(len(data), seed=1)
    drawn = [tasks[i] for i in stream.take(5000)]
    assert drawn.count("a") / 5000 == pytest.approx(0.75, abs=0.02)
    # Each row keeps its task and its own prompt, so it routes to its env.
    row = data[int(tasks.index("b"))]
    assert row["task"] == "b" and row["prompt"][-1]["content"].startswith("b")


def test_weighted_group_is_deterministic_for_a_seed():
    def mixture(seed):
        group = EnvGroup([plain("a", 7), plain("b", 50)], env_names=["a", "b"], weights=[1, 2], seed=seed)
        return [p[-1]["content"] for p in group.dataset["prompt"]]

    assert mixture(3) == mixture(3)
    assert mixture(3) != mixture(4)
    # Without weights the dataset is the plain concatenation, as before.
    unweighted = EnvGroup([plain("a", 7), plain("b", 50)])
    assert unweighted.dataset["task"] == ["env_0"] * 7 + ["env_1"] * 50


async def test_weighted_group_routes_and_scores_per_env():
    group = EnvGroup([member("MATH", 2, {}), member("CODE", 6, {})], env_names=["m", "c"], weights=[1, 1])
    assert list(group.dataset["task"]).count("m") == 4
    with fake_server(reply) as server:
        results = await group.a_generate(group.get_dataset(), server.client(), "model")
    assert results.reward == [1.0] * 8  # each rollout ran on, and was scored by, its own env
    assert results.metrics["says_math"] == [1.0 if t == "m" else 0.0 for t in results.task]


@pytest.mark.parametrize(
    ("weights", "expected"),
    [
        ([1.0], "2 envs but 1 weights"),
        ([1.0, 0], r"weights\[1\] \(env 'b'\) = 0 is not a positive finite number \(use a number > 0"),
        ([-2, 1.0], r"weights\[0\] \(env 'a'\) = -2 is not a positive"),
        ([1.0, float("nan")], r"= nan is not a positive finite number"),
        ([float("inf"), 1.0], r"= inf is not a positive finite number"),
        ([1.0, "3"], r"= '3' is not a positive finite number"),
        ([True, 1.0], r"= True is not a positive finite number"),
        ({"a": 1, "b": 2}, "must be a list with one number per env, got dict"),
    ],
)
def test_bad_weights_are_a_clear_error(weights, expected):
    with pytest.raises(ConfigError, match=expected):
        EnvGroup([plain("a", 2), plain("b", 2)], env_names=["a", "b"], weights=weights)


def test_weighted_member_without_training_rows_is_an_error():
    eval_only = SingleTurnEnv(eval_dataset=Dataset.from_dict({"question": ["e"]}))
    with pytest.raises(ConfigError, match="env_1 have a weight but no training rows"):
        EnvGroup([plain("a", 2), eval_only], weights=[1, 1])


TOML = (
    """
model = "smollm2"

[[env]]
id = "big"
args = {{ n = 40 }}
{big}

[[env]]
id = "small"
args = {{ n = 8 }}
{small}

[inference]
gpus = 0

"""
    + TRAINER_TABLES
)


def test_toml_env_weights_become_the_group_weights(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    import verifiers as vf
    from verifiers.cli import train
    from verifiers.cli.run_config import load as toml_config

    monkeypatch.setattr(vf, "load_environment", lambda env_id, n: plain(env_id, n))

    def group_of(big: str, small: str):
        path = tmp_path / "cfg.toml"
        path.write_text(TOML.format(big=big, small=small))
        config = toml_config.load_config(path)
        return train.load_envs(config.envs, seed=config.rl_config().grpo_args.get("seed", 0))

    tasks = list(group_of("weight = 3", "weight = 1.0").dataset["task"])
    assert len(tasks) == 48 and tasks.count("big") == 36 and tasks.count("small") == 12  # 3:1
    # A weight on one table only: the other counts 1.0. No weight at all: the sizes decide.
    assert list(group_of("weight = 1", "").dataset["task"]).count("small") == 24
    unweighted = group_of("", "")
    assert unweighted.weights is None and list(unweighted.dataset["task"]).count("small") == 8
    with pytest.raises(ConfigError, match=r"env.0.weight = -1 must be > 0 and finite"):
        group_of("weight = -1", "")
    with pytest.raises(ConfigError, match=r"env.0.weight = nan must be > 0 and finite"):
        group_of("weight = nan", "")
