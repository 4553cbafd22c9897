"""Typed rollout failures: each kind is set where it happens (the environments' rollouts,
verifiers/envs/) and counted by kind, not by parsing text. (The failure as data:
tests/test_failures.py; the count by kind: tests/training/metrics/test_step.py.)"""

from __future__ import annotations

import math

import pytest
from datasets import Dataset

from tests.doubles.openai_server import fake_server, make_client, unused_url
from verifiers.envs.environment import Environment
from verifiers.envs.multiturn import MultiTurnEnv
from verifiers.envs.singleturn import SingleTurnEnv
from verifiers.envs.state import new_state
from verifiers.errors import ServerError, ServerTimeoutError
from verifiers.failures import FailureKind, RolloutFailure, model_call_kind
from verifiers.rubrics.rubric import Rubric
from verifiers.training.metrics.step import BATCH_COUNTERS, failure_counts

pytestmark = pytest.mark.usefixtures("fresh_warnings")  # tests/conftest.py


def one(row_answer: str = "1") -> Dataset:
    return Dataset.from_dict({"question": ["q"], "answer": [row_answer]})


def echo(req):
    return "echo: " + str(req["messages"][-1]["content"])


class Hooks(MultiTurnEnv):
    """A two-turn env whose hooks raise when told to."""

    def __init__(self, fail_in: str | None, **kw):
        self.fail_in = fail_in
        super().__init__(dataset=one(), rubric=Rubric(funcs=[lambda completion: 1.0]), max_turns=2, **kw)

    def _maybe_fail(self, hook: str) -> None:
        if self.fail_in == hook:
            raise RuntimeError(f"{hook} broke")

    async def setup_state(self, state, **kw):
        self._maybe_fail("setup_state")
        return state

    async def is_completed(self, messages, state, **kw):
        self._maybe_fail("is_completed")
        return False

    async def env_response(self, messages, state, **kw):
        self._maybe_fail("env_response")
        return [{"role": "user", "content": "again"}], state


@pytest.mark.parametrize(
    ("hook", "kind"),
    [
        ("setup_state", FailureKind.SETUP_STATE),
        ("is_completed", FailureKind.IS_COMPLETED),
        ("env_response", FailureKind.ENV_RESPONSE),
    ],
)
async def test_hook_failures_are_typed_at_their_source(hook, kind):
    with fake_server(echo) as server:
        env = Hooks(hook)
        results = await env.a_generate(env.get_dataset(), server.client(), "m")
    failure = results.state[0]["failure"]
    assert isinstance(failure, RolloutFailure) and failure.kind is kind
    assert failure.message == results.state[0]["error"] and f"{hook} broke" in failure.message
    assert results.reward == [0.0]
    counts = failure_counts(results)
    assert counts[f"errors/{kind.value}"] == 1.0 and counts["rollout_errors"] == 1.0
    assert sum(counts[name] for name in BATCH_COUNTERS) == 1.0


async def test_server_error_answer_is_typed():
    with fake_server(lambda req: {"status": 500, "error": "boom"}) as server:
        env = Hooks(None)
        results = await env.a_generate(env.get_dataset(), server.client(), "m")
    assert results.state[0]["failure"].kind is FailureKind.SERVER_ERROR
    assert failure_counts(results)["errors/server_error"] == 1.0


async def test_unreachable_server_is_typed():
    env = Hooks(None)
    _, state = await env.rollout(make_client(unused_url()), "m", [{"role": "user", "content": "q"}])
    assert state["failure"].kind is FailureKind.SERVER_UNREACHABLE


@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (ServerTimeoutError("slow"), FailureKind.SERVER_TIMEOUT),
        (ServerError("bad"), FailureKind.SERVER_ERROR),
        (RuntimeError("sdk bug"), FailureKind.MODEL_CALL),
    ],
)
async def test_model_call_failures_are_typed_by_exception_type(err, kind, monkeypatch):
    env = Hooks(None)

    async def fail(*args, **kwargs):
        raise err

    monkeypatch.setattr(env, "get_model_response", fail)
    _, state = await env.rollout(None, "m", [{"role": "user", "content": "q"}])
    assert state["failure"].kind is kind and model_call_kind(err) is kind


async def test_unreadable_response_is_typed(monkeypatch):
    env = Hooks(None)

    async def garbage(*args, **kwargs):
        return object()

    monkeypatch.setattr(env, "get_model_response", garbage)
    _, state = await env.rollout(None, "m", [{"role": "user", "content": "q"}])
    assert state["failure"].kind is FailureKind.BAD_RESPONSE
    assert state["error"].startswith("reading the response: ")


class Custom(Environment):
    """A 0.1.x-style env with its own rollout."""

    def __init__(self, mode: str):
        self.mode = mode
        super().__init__(dataset=one())

    async def rollout(self, client, model, prompt, answer="", task="default", info=None, **kwargs):
        if self.mode == "raise":
            raise ValueError("custom rollout broke")
        state = new_state(prompt, answer, task, info or {})
        state.pop("failure")  # as 0.1.x code builds it: no typed field
        state["error"] = "gave up"
        return [], state


@pytest.mark.parametrize("mode", ["raise", "sets-error"])
async def test_custom_rollout_failures_are_typed(mode):
    env = Custom(mode)
    results = await env.a_generate(env.get_dataset(), None, "m")
    failure = results.state[0]["failure"]
    assert failure.kind is FailureKind.ROLLOUT and results.reward == [0.0]
    assert results.metrics["rollout_errors"] == [1.0]
    assert failure_counts(results)["errors/rollout"] == 1.0


async def test_reward_problems_are_counted_by_kind():
    def broken(completion):
        raise ZeroDivisionError("oops")

    def nan(completion):
        return math.nan

    with fake_server(echo) as server:
        env = SingleTurnEnv(dataset=one(), rubric=Rubric(funcs=[broken, nan]))
        results = await env.a_generate(env.get_dataset(), server.client(), "m")
    assert results.state[0]["failure"] is None
    counts = failure_counts(results)
    assert counts["errors/reward_fn"] == 1.0 and counts["errors/nonfinite_reward"] == 1.0
    assert counts["rollout_errors"] == 0.0
