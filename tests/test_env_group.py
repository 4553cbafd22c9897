"""EnvGroup: dataset concatenation, routing by task, per-env rubrics, metric filling."""

from __future__ import annotations

import pytest
from datasets import Dataset

from tests.fakeserver import fake_server
from verifiers.envs.group import EnvGroup
from verifiers.envs.model_client import forget_token_support
from verifiers.envs.singleturn import SingleTurnEnv
from verifiers.errors import ConfigError
from verifiers.rubrics.rubric import Rubric
from verifiers.utils.logging import reset_warn_once


@pytest.fixture(autouse=True)
def _fresh_process_state():
    reset_warn_once()
    forget_token_support()


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
    assert group.eval_dataset["task"] == ["env_0"]
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
