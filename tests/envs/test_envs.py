"""Environment, SingleTurnEnv and MultiTurnEnv against the local fake OpenAI server."""

from __future__ import annotations

import logging
import threading

import pytest
from datasets import Dataset

from tests.doubles.openai_server import (
    fake_server,
    logprob_of,
    make_client,
    render_chat,
    tokenize,
    unused_url,
)
from verifiers.envs.environment import ERROR_METRIC
from verifiers.envs.model_client import build_request
from verifiers.envs.multiturn import MultiTurnEnv
from verifiers.envs.singleturn import SingleTurnEnv
from verifiers.errors import ConfigError, DatasetFormatError, ServerUnreachableError
from verifiers.rubrics.rubric import Rubric

pytestmark = pytest.mark.usefixtures("fresh_process_state")  # tests/envs/conftest.py


@pytest.fixture
def vf_logs():
    """Records of the ``verifiers`` logger (it may not propagate to the root logger)."""
    records: list[logging.LogRecord] = []

    class _Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = _Keep(level=logging.DEBUG)
    logger = logging.getLogger("verifiers")
    logger.addHandler(handler)
    yield records
    logger.removeHandler(handler)


def qa_dataset(n: int = 3) -> Dataset:
    return Dataset.from_dict({"question": [f"q{i}" for i in range(n)], "answer": [f"a{i}" for i in range(n)]})


def exact(completion, answer) -> float:
    """Reward: the assistant's text equals 'echo: q<i>' for answer 'a<i>'."""
    text = completion[-1]["content"] if isinstance(completion, list) else completion
    return 1.0 if text == f"echo: q{answer[1:]}" else 0.0


def single(**kw) -> SingleTurnEnv:
    kw.setdefault("dataset", qa_dataset())
    kw.setdefault("rubric", Rubric(funcs=[exact]))
    return SingleTurnEnv(**kw)


# -- dataset formatting ----------------------------------------------------------


def test_question_becomes_system_fewshot_user_prompt():
    few = [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]
    env = single(system_prompt="Be brief.", few_shot=few)
    row = env.dataset[0]
    assert row["prompt"][0] == {"role": "system", "content": "Be brief."}
    assert [m["content"] for m in row["prompt"][1:]] == ["2+2?", "4", "q0"]
    assert row["prompt"][-1]["role"] == "user"
    assert row["answer"] == "a0" and row["task"] == "default" and row["info"] == {} and row["id"] == 0


def test_completion_type_builds_string_prompt():
    env = single(message_type="completion", system_prompt="SYS")
    assert env.dataset[1]["prompt"] == "SYS\n\nq1"


def test_prompt_column_kept_and_defaults_added():
    ds = Dataset.from_dict({"prompt": [[{"role": "user", "content": "hi"}]], "info": ['{"k": 1}']})
    env = single(dataset=ds)
    assert env.dataset[0]["prompt"] == [{"role": "user", "content": "hi"}]
    assert env.dataset.column_names == ["prompt", "info", "answer", "task", "id"]


def test_dataset_errors():
    with pytest.raises(DatasetFormatError, match="neither a 'prompt' nor a 'question' column.*columns: text"):
        single(dataset=Dataset.from_dict({"text": ["x"]}))
    with pytest.raises(ConfigError, match="needs a dataset"):
        SingleTurnEnv(rubric=Rubric())
    with pytest.raises(DatasetFormatError, match="row 0.*not valid JSON"):
        single(dataset=Dataset.from_dict({"question": ["x"], "info": ["{oops"]}))
    with pytest.raises(DatasetFormatError, match="completion"):
        single(
            dataset=Dataset.from_dict({"prompt": [[{"role": "user", "content": "x"}]]}),
            message_type="completion",
        )
    with pytest.raises(ConfigError, match="message_type"):
        single(message_type="voice")


def test_extra_kwargs_attributes_and_splits(vf_logs):
    env = single(dataset=qa_dataset(10), my_setting=7)
    assert env.my_setting == 7
    assert len(env.get_dataset(n=4)) == 4
    assert env.get_dataset(n=10, seed=1)["question"] != env.get_dataset()["question"]
    assert len(env.get_eval_dataset(n=2)) == 2  # falls back to train
    assert any("no eval_dataset" in r.getMessage() for r in vf_logs)
    env = single(dataset=None, eval_dataset=qa_dataset(2))
    with pytest.raises(ConfigError, match="no training dataset"):
        env.get_dataset()


# -- single turn through the fake server --------------------------------------------


async def test_single_turn_rollout_records_token_data():
    with fake_server() as server:
        env = single()
        prompt = env.dataset[0]["prompt"]
        completion, state = await env.rollout(server.client(), "m", prompt, answer="a0")
    assert completion == [{"role": "assistant", "content": "echo: q0"}]
    for key in (
        "prompt",
        "completion",
        "answer",
        "task",
        "info",
        "responses",
        "turn_tokens",
        "turn",
        "timing",
    ):
        assert key in state
    assert state["turn"] == 1 and state["error"] is None and state["is_truncated"] is False
    (tt,) = state["turn_tokens"]
    assert tt.prompt_ids == tokenize(render_chat(prompt))
    assert tt.completion_ids == tokenize("echo: q0<|end|>")
    assert tt.completion_logprobs == [logprob_of(t) for t in tt.completion_ids]
    assert tt.finish_reason == "stop"
    _, body = server.requests[-1]
    assert body["logprobs"] is True and body["return_token_ids"] and body["return_tokens_as_token_ids"]


def test_request_mapping_max_tokens_and_extra_body():
    import openai

    client = openai.OpenAI(api_key="x", base_url="http://127.0.0.1:9/v1")
    args = {"max_tokens": 5, "top_k": 3, "temperature": None, "extra_body": {"min_p": 0.1}}
    chat = build_request(client.chat.completions.create, "m", [], "chat", args, None, token_data=True)
    assert chat["max_completion_tokens"] == 5 and "max_tokens" not in chat and "temperature" not in chat
    assert chat["extra_body"] == {
        "min_p": 0.1,
        "return_tokens_as_token_ids": True,
        "return_token_ids": True,
        "top_k": 3,
    }
    comp = build_request(
        client.completions.create, "m", "p", "completion", {"max_completion_tokens": 4}, None, False
    )
    assert comp["max_tokens"] == 4 and comp["prompt"] == "p" and "extra_body" not in comp


def test_generate_with_sync_client_and_async_client_twice():
    with fake_server(delay=0.05) as server:
        env = single(dataset=qa_dataset(4))
        sync_results = env.generate(env.get_dataset(), server.client(sync=True), "m")
        client = server.client()
        # Same AsyncOpenAI client in two sync calls: both run on one shared loop.
        first = env.generate(env.get_dataset(), client, "m")
        second = env.evaluate(client, "m", num_examples=2)
    for results in (sync_results, first):
        assert results.reward == [1.0] * 4
        assert all(s["turn_tokens"][0].completion_ids for s in results.state)
    assert second.reward == [1.0, 1.0]
    assert server.max_in_flight > 1  # the sync client's calls ran in threads, concurrently


async def test_completion_message_type_rollout():
    def reply(req):
        return {"content": "world", "finish_reason": "stop"}

    with fake_server(reply) as server:
        env = single(message_type="completion", rubric=Rubric())
        results = await env.a_generate(
            env.get_dataset(n=1), server.client(), "m", sampling_args={"max_tokens": 50}
        )
    assert results.completion == ["world"]
    tt = results.state[0]["turn_tokens"][0]
    assert tt.prompt_ids == tokenize("q0") and tt.completion_ids == tokenize("world")
    assert len(tt.completion_logprobs) == len(tt.completion_ids)
    assert server.requests[-1][1]["max_tokens"] == 50 and server.requests[-1][1]["logprobs"] == 1


async def test_endpoint_rejecting_token_params_is_retried_once_and_remembered(vf_logs):
    with fake_server(reject_token_params=True) as server:
        env = single()
        results = await env.a_generate(env.get_dataset(), server.client(), "m", max_concurrent=1)
    assert results.reward == [1.0, 1.0, 1.0]
    assert all(s["turn_tokens"][0].completion_ids == [] for s in results.state)
    assert all(s["turn_tokens"][0].finish_reason == "stop" for s in results.state)
    # First call: rejected + retried; the next two go straight without the parameters.
    assert len(server.requests) == 4
    assert "return_token_ids" not in server.requests[-1][1] and "logprobs" not in server.requests[-1][1]
    warnings = [r for r in vf_logs if "rejected the token-data parameters" in r.getMessage()]
    assert len(warnings) == 1 and server.url.rstrip("/") in warnings[0].getMessage()


async def test_max_concurrent_is_honoured():
    with fake_server(delay=0.05) as server:
        env = single(dataset=qa_dataset(9))
        results = await env.a_generate(env.get_dataset(), server.client(), "m", max_concurrent=3)
    assert server.max_in_flight == 3
    assert results.reward == [1.0] * 9


async def test_each_rollout_is_scored_as_soon_as_it_finishes():
    events: list[tuple[str, str]] = []
    lock = threading.Lock()

    def reply(req):
        question = req["messages"][-1]["content"]
        with lock:
            events.append(("reply", question))
        return {"content": f"echo: {question}", "delay": 0.6 if question == "q0" else 0.0}

    def record(answer) -> float:
        events.append(("score", answer))
        return 1.0

    progress: list[tuple[int, int]] = []
    with fake_server(reply) as server:
        env = single(dataset=qa_dataset(2), rubric=Rubric(funcs=[record]))
        results = await env.a_generate(
            env.get_dataset(), server.client(), "m", on_progress=lambda d, t: progress.append((d, t))
        )
    # q1's rollout was scored while q0's was still generating.
    assert events.index(("score", "a1")) < events.index(("score", "a0"))
    assert results.answer == ["a0", "a1"]  # results keep input order
    assert progress == [(1, 2), (2, 2)]
    timing = results.state[0]["timing"]
    assert timing["generation_ms"] >= 500 and timing["total_ms"] >= timing["generation_ms"]


async def test_generate_inside_running_event_loop():
    with fake_server() as server:
        env = single()
        results = env.generate(env.get_dataset(), server.client(), "m")  # sync call from a coroutine
    assert results.reward == [1.0, 1.0, 1.0]


async def test_length_cut_sets_truncated():
    with fake_server() as server:
        env = single()
        results = await env.a_generate(
            env.get_dataset(n=1), server.client(), "m", sampling_args={"max_tokens": 3}
        )
    state = results.state[0]
    assert state["is_truncated"] and state["turn_tokens"][0].finish_reason == "length"
    assert results.completion[0][0]["content"] == "ech"
    assert server.requests[-1][1]["max_completion_tokens"] == 3


async def test_failed_rollouts_are_values_and_all_unreachable_raises():
    def reply(req):
        if req["messages"][-1]["content"] == "q1":
            return {"status": 500, "error": "boom"}
        return "echo: " + req["messages"][-1]["content"]

    with fake_server(reply) as server:
        env = single()
        results = await env.a_generate(env.get_dataset(), server.client(), "m")
    assert results.reward == [1.0, 0.0, 1.0]
    assert results.state[1]["error"].startswith("ServerError") and "status=500" in results.state[1]["error"]
    assert results.metrics[ERROR_METRIC] == [0.0, 1.0, 0.0]
    assert results.metrics["exact"] == [1.0, 0.0, 1.0]

    url = unused_url()
    with pytest.raises(ServerUnreachableError, match=url.replace(".", r"\.")):
        await env.a_generate(env.get_dataset(), make_client(url), "m")


async def test_get_model_response_unreachable_names_url():
    url = unused_url()
    env = single()
    with pytest.raises(ServerUnreachableError) as info:
        await env.get_model_response(make_client(url), "m", [{"role": "user", "content": "hi"}])
    assert info.value.url == url and url in str(info.value)
    with pytest.raises(ServerUnreachableError, match="start the server"):
        await env.get_model_response(make_client(url, sync=True), "m", "hi", message_type="completion")


def test_evaluate_rollouts_per_example_and_make_dataset():
    with fake_server() as server:
        env = single(dataset=qa_dataset(5), eval_dataset=qa_dataset(3))
        results = env.evaluate(server.client(), "m", num_examples=2, rollouts_per_example=3, max_concurrent=2)
    assert results.answer == ["a0"] * 3 + ["a1"] * 3
    assert results.reward == [1.0] * 6
    ds = env.make_dataset(results, state_columns=["turn"])
    assert {"prompt", "completion", "answer", "task", "info", "reward", "exact", "turn"} <= set(
        ds.column_names
    )
    assert len(ds) == 6 and ds[0]["turn"] == 1
    with pytest.raises(ConfigError, match="hub_name"):
        env.make_dataset(results, push_to_hub=True)


async def test_context_overflow_ends_rollout_as_truncated():
    with fake_server(max_context=10) as server:
        env = single()
        results = await env.a_generate(env.get_dataset(n=1), server.client(), "m")
    state = results.state[0]
    assert state["is_truncated"] and state["error"] is None and state["turn"] == 0


def test_process_env_results_delegates(monkeypatch):
    import verifiers.tokenization.assembly as tokens

    seen = {}

    def fake_process(states, rewards, processing_class, **kw):
        seen.update(states=states, rewards=rewards, pc=processing_class, **kw)
        return "processed"

    monkeypatch.setattr(tokens, "process_rollouts", fake_process)
    env = single()
    out = env.process_env_results([], [], [{"x": 1}], [0.5], "tok", max_seq_len=9, mask_env_responses=True)
    assert out == "processed"
    assert seen["states"] == [{"x": 1}] and seen["max_seq_len"] == 9 and seen["mask_env_responses"] is True


# -- multi turn ----------------------------------------------------------------------


def guess_reply(req):
    """A model that guesses 1, 2, 3, ... (one more than its previous guesses)."""
    guesses = sum(1 for m in req["messages"] if m["role"] == "assistant")
    return str(guesses + 1)


class GuessEnv(MultiTurnEnv):
    """The player must say the target number; the env answers 'no' until then."""

    async def setup_state(self, state, **kw):
        state["target"] = int(state["answer"])
        return state

    def is_completed(self, messages, state, **kw):
        return messages[-1]["content"] == str(state["target"])

    async def env_response(self, messages, state, **kw):
        if state["target"] == 99:
            raise RuntimeError("env exploded")
        return [{"role": "user", "content": "no"}], state


def found(completion, answer) -> float:
    return 1.0 if completion[-1]["content"] == answer else 0.0


def guess_env(answers, max_turns=-1) -> GuessEnv:
    ds = Dataset.from_dict({"question": ["guess"] * len(answers), "answer": answers})
    return GuessEnv(dataset=ds, rubric=Rubric(funcs=[found]), max_turns=max_turns)


async def test_multiturn_guessing_game():
    with fake_server(guess_reply) as server:
        env = guess_env(["3", "1"])
        results = await env.a_generate(env.get_dataset(), server.client(), "m")
    assert results.reward == [1.0, 1.0]
    completion = results.completion[0]
    assert [m["content"] for m in completion] == ["1", "no", "2", "no", "3"]
    state = results.state[0]
    assert state["turn"] == 3 and len(state["turn_tokens"]) == 3 and len(state["responses"]) == 3
    # Each turn's prompt extends the previous prompt + completion (no history rewriting).
    t0, t1 = state["turn_tokens"][:2]
    assert t1.prompt_ids[: len(t0.prompt_ids) + len(t0.completion_ids)] == t0.prompt_ids + t0.completion_ids


async def test_multiturn_max_turns():
    with fake_server(guess_reply) as server:
        env = guess_env(["5"], max_turns=2)
        results = await env.a_generate(env.get_dataset(), server.client(), "m")
    assert results.state[0]["turn"] == 2 and results.reward == [0.0]
    assert results.state[0]["error"] is None


async def test_env_response_error_ends_only_that_rollout(vf_logs):
    with fake_server(guess_reply) as server:
        env = guess_env(["99", "2", "99"])
        results = await env.a_generate(env.get_dataset(), server.client(), "m")
    assert results.reward == [0.0, 1.0, 0.0]
    bad = results.state[0]
    assert bad["error"].startswith("env_response: RuntimeError: env exploded")
    assert bad["turn"] == 1 and bad["completion"] == [{"role": "assistant", "content": "1"}]
    assert results.metrics[ERROR_METRIC] == [1.0, 0.0, 1.0]
    logged = [r for r in vf_logs if "env exploded" in r.getMessage()]
    assert len(logged) == 1  # once per env class, not per rollout


async def test_a_generate_accepts_dict_inputs():
    with fake_server(guess_reply) as server:
        env = guess_env(["1"])
        inputs = {
            "prompt": [[{"role": "user", "content": "go"}]] * 2,
            "answer": ["2", "1"],
            "info": ['{"a": 1}', None],
        }
        results = await env.a_generate(inputs, server.client(), "m", score_rollouts=False)
    assert results.info == [{"a": 1}, {}]
    assert results.task == ["default", "default"]
    assert results.reward == [0.0, 0.0] and results.state[0]["turn"] == 2


def test_blocking_methods_follow_an_overridden_async_method():
    """``generate`` / ``evaluate`` run ``self.a_generate`` / ``self.a_evaluate``, overrides included."""
    import inspect

    from verifiers.envs.environment import Environment

    class Counting(SingleTurnEnv):
        calls: list[str] = []

        async def a_generate(self, inputs, client, model, *args, **kwargs):
            self.calls.append("a_generate")
            return "generated"

        async def a_evaluate(self, client, model, *args, **kwargs):
            self.calls.append("a_evaluate")
            return await super().a_evaluate(client, model, *args, **kwargs)

    env = Counting(dataset=qa_dataset(), eval_dataset=qa_dataset(), rubric=Rubric(funcs=[exact]))
    assert env.generate({"prompt": []}, None, "m") == "generated"
    assert env.evaluate(None, "m", num_examples=1) == "generated"
    assert Counting.calls == ["a_generate", "a_evaluate", "a_generate"]
    assert Environment.generate.__name__ == "generate"
    assert list(inspect.signature(Environment.evaluate).parameters)[:4] == [
        "self",
        "client",
        "model",
        "sampling_args",
    ]
