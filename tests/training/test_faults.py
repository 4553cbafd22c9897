"""Fault suite: GRPOTrainer runs that meet a failure and still finish, step for step.

Each scenario is a short run (tiny random model, a real vf-vllm server started
once for the module) in which something goes wrong: a reward function raises,
``env_response`` raises, a tool hangs, the server is killed and restarted, a
generation batch times out, rewards are NaN/inf, completions are empty, every
group scores the same, completions are cut at ``max_tokens``, a chat template
rewrites earlier turns. Every run must:

- reach ``max_steps`` with exactly one log entry per step 1..max_steps, each step
  training its own generation batch (0, 1, ...: none lost, none trained twice);
- show the failure in a named metric of the step logs;
- log the failure once, not once per sample.

The random model never ends a turn by itself (it always runs to ``max_tokens``);
scenarios that need a turn to end early make it emit its end-of-turn token at
once with a ``logit_bias``.

The kill/restart scenario starts vf-vllm twice more (about a minute each on two
busy cores), so it is marked ``slow``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import threading
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
datasets = pytest.importorskip("datasets")

from transformers import TrainerCallback  # noqa: E402

import verifiers as vf  # noqa: E402
from tests.doubles.trainer import grpo_args  # noqa: E402
from tests.doubles.vllm_server import serve  # noqa: E402
from verifiers.utils.logging import reset_warn_once  # noqa: E402

pytestmark = pytest.mark.server

MAX_STEPS = 2

# Renders every assistant turn but the last as "(earlier turn)": like Qwen3's template
# dropping <think> blocks, a later prompt no longer extends the earlier tokens.
REWRITING_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' and not loop.last %}<|im_start|>assistant\n(earlier turn)<|im_end|>\n"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


# ---------------------------------------------------------------------------
# The server: one per module, restartable on the same port


@pytest.fixture(scope="module")
def server(tiny_model_dir, tmp_path_factory):
    """vf-vllm serving the tiny model, which a test may kill (SIGKILL) and start again."""
    flags = ("--max-num-seqs", "32", "--seed", "0", "--no-enable-chunked-prefill")
    flags += ("--trust-request-chat-template",)  # the rewriting-template scenario sends its own
    with serve(tiny_model_dir, tmp_path_factory.mktemp("faults-vllm"), *flags, ready_timeout=300) as srv:
        yield srv


@pytest.fixture(scope="module")
def eos_bias(tiny_model_dir):
    """Sampling args that make the model end its turn at once (an empty completion)."""
    tokenizer = vf.get_tokenizer(str(tiny_model_dir))
    return {"logit_bias": {str(tokenizer.eos_token_id): 100}}


@pytest.fixture
def logs(caplog):
    """Every record of the ``verifiers`` loggers, whatever their propagation; warn_once forgotten."""
    reset_warn_once()
    root = logging.getLogger("verifiers")
    propagate = root.propagate
    root.addHandler(caplog.handler)
    root.propagate = False  # captured once, by our handler
    caplog.set_level(logging.INFO, logger="verifiers")
    yield caplog
    root.removeHandler(caplog.handler)
    root.propagate = propagate


def count(caplog, text: str) -> int:
    return sum(text in r.getMessage() for r in caplog.records)


# ---------------------------------------------------------------------------
# Runs


def fault_args(tmp_path, **overrides) -> vf.GRPOConfig:
    base = dict(
        max_steps=MAX_STEPS,  # 8 rollouts = 2 prompts x 4 per step
        max_tokens=8,
        shuffle_dataset=False,  # batch g holds rows 2g and 2g+1
        mask_truncated_completions=False,  # the random model always runs to max_tokens
        vllm_server_timeout=300,
    )
    base.update(overrides)
    return grpo_args(tmp_path, **base)


def rows(answers: list[str]) -> datasets.Dataset:
    """Questions whose ``answer`` column tells the scenario's env or rubric what to do with the row."""
    return datasets.Dataset.from_dict(
        {"question": [f"Count to {i}." for i in range(len(answers))], "answer": answers}
    )


def text_of(completion) -> str:
    if isinstance(completion, str):
        return completion
    return "".join(str(m.get("content") or "") for m in completion if m.get("role") == "assistant")


def length_reward(completion, **_) -> float:
    return min(len(text_of(completion)), 200) / 100.0


class BatchRecorder(TrainerCallback):
    """Which generation batch each optimizer step trained on."""

    def __init__(self, trainer):
        self.trainer, self.batches = trainer, []

    def on_step_end(self, args, state, control, **kwargs):
        self.batches.append(self.trainer._prepared.index)


def train(server, tmp_path, env, callbacks=(), **overrides):
    """A short run against ``server``; checks that every step trained its own batch, once."""
    args = fault_args(tmp_path, vllm_server_port=server.port, vllm_server_host="127.0.0.1", **overrides)
    model, tokenizer = vf.get_model_and_tokenizer(str(server.model_dir))
    trainer = vf.GRPOTrainer(model=model, processing_class=tokenizer, env=env, args=args)
    recorder = BatchRecorder(trainer)
    trainer.add_callback(recorder)
    for cb in callbacks:
        cb(trainer)
    trainer.train()
    steps = args.max_steps
    assert trainer.state.global_step == steps
    history = [h for h in trainer.state.log_history if "loss" in h and "step" in h]
    assert [h["step"] for h in history] == list(range(1, steps + 1)), history
    assert recorder.batches == list(range(steps)), recorder.batches  # none lost, none twice
    for h in history:
        assert math.isfinite(h["loss"]) and math.isfinite(h["reward"]), h
    assert not [t for t in threading.enumerate() if t.name == "vf-generator" and t.is_alive()]
    return trainer, history


def metric(history, name) -> list[float]:
    return [h[name] for h in history]


# ---------------------------------------------------------------------------
# Scenarios


def test_reward_function_that_raises(server, tmp_path, logs):
    def flaky(completion, answer, **_) -> float:
        if answer == "boom":
            raise ValueError("the grader crashed")
        return 1.0

    env = vf.SingleTurnEnv(dataset=rows(["boom", "ok"] * 4), rubric=vf.Rubric(funcs=[length_reward, flaky]))
    _, history = train(server, tmp_path, env)
    # One of the two prompts per batch raises: 4 of 8 rollouts, every step.
    assert metric(history, "errors/reward_fn") == [4.0] * MAX_STEPS
    assert metric(history, "rewards/flaky_error") == [0.5] * MAX_STEPS
    assert metric(history, "errors/nonfinite_reward") == [0.0] * MAX_STEPS
    assert count(logs, "reward function 'flaky' failed") == 1


def turns(state, **_) -> float:
    return float(state["turn"])


class ExplodingEnv(vf.MultiTurnEnv):
    """Replies "again" to the model, but raises on rows whose answer is "explode"."""

    def is_completed(self, messages, state, **kwargs):
        return False

    def env_response(self, messages, state, **kwargs):
        if state["answer"] == "explode":
            raise RuntimeError("the environment fell over")
        return [{"role": "user", "content": "again"}], state


def test_env_response_that_raises(server, tmp_path, logs, eos_bias):
    env = ExplodingEnv(
        dataset=rows(["explode", "ok"] * 4),
        rubric=vf.Rubric(funcs=[turns]),
        max_turns=3,
        sampling_args=eos_bias,  # every model turn ends at once, so env_response is reached
    )
    _, history = train(server, tmp_path, env)
    assert metric(history, "errors/env_response") == [4.0] * MAX_STEPS
    assert metric(history, "rollout_errors") == [4.0] * MAX_STEPS
    assert count(logs, "rollout ended by an error in env_response") == 1


def test_tool_that_hangs_past_its_limit(server, tmp_path, logs, eos_bias):
    release = threading.Event()

    def lookup(query: str) -> str:
        """Look something up (hangs)."""
        release.wait(30)
        return "found"

    class HangingToolEnv(vf.ToolEnv):
        """A random model cannot write tool calls: each turn it is given one (a real ToolEnv call)."""

        def is_completed(self, messages, state, **kwargs):
            return state["turn"] >= 2

        async def env_response(self, messages, state, **kwargs):
            call = {"id": f"call-{state['turn']}", "type": "function"}
            call["function"] = {"name": "lookup", "arguments": '{"query": "x"}'}
            messages[-1]["tool_calls"] = [call]
            return await super().env_response(messages, state, **kwargs)

    env = HangingToolEnv(
        tools=[lookup],
        dataset=rows(["ok"] * 8),
        rubric=vf.Rubric(funcs=[length_reward]),
        # "none": the model is not asked for tool calls; env_response above writes them.
        sampling_args={**eos_bias, "tool_choice": "none"},
    )
    env.tool_timeout = 0.5
    try:
        start = time.monotonic()
        # Room for the tool's schema: the server's tool template puts it in the prompt (~190 tokens).
        _, history = train(server, tmp_path, env, max_seq_len=512, max_prompt_length=256)
    finally:
        release.set()
    assert metric(history, "errors/tool_timeout") == [8.0] * MAX_STEPS  # one call per rollout
    assert metric(history, "rollout_errors") == [0.0] * MAX_STEPS  # a slow tool is not a failed rollout
    assert count(logs, "ran past tool_timeout") == 1
    assert time.monotonic() - start < 60 * MAX_STEPS  # never waited for the tool itself


class SlowFirstAttemptEnv(vf.SingleTurnEnv):
    """The first attempt at the first batch hangs; every rollout's prompt is recorded."""

    def __init__(self, hang: int, **kwargs):
        super().__init__(**kwargs)
        self.hang, self.calls = hang, []

    async def setup_state(self, state, **kwargs):
        self.calls.append(state["prompt"][-1]["content"])
        if len(self.calls) <= self.hang:
            await asyncio.sleep(3600)  # cancelled by the generation timeout
        return state


def test_generation_timeout_retries_the_batch(server, tmp_path, logs):
    env = SlowFirstAttemptEnv(hang=8, dataset=rows(["ok"] * 8), rubric=vf.Rubric(funcs=[length_reward]))
    _, history = train(server, tmp_path, env, async_generation_timeout=10)
    assert metric(history, "errors/generation_timeout") == [1.0, 0.0]
    # The retry generated the same prompts (the prompt cursor was rewound): 0 and 1, then 2 and 3.
    first, retry, second = env.calls[:8], env.calls[8:16], env.calls[16:24]
    assert sorted(first) == sorted(retry) == sorted(["Count to 0.", "Count to 1."] * 4)
    assert sorted(second) == sorted(["Count to 2.", "Count to 3."] * 4)
    assert count(logs, "took longer than async_generation_timeout") == 1


class NanRubric(vf.Rubric):
    """A rubric whose own total comes out infinite for rows answered "inf" (a custom rubric bug)."""

    async def score_rollout(self, prompt, completion, answer, state, task="default", info=None, **kwargs):
        score = await super().score_rollout(prompt, completion, answer, state, task, info, **kwargs)
        if answer == "inf":
            score.reward = math.inf
        return score


def test_nan_and_infinite_rewards(server, tmp_path, logs):
    def nan_reward(completion, answer, **_) -> float:
        return math.nan if answer == "nan" else length_reward(completion)

    env = vf.SingleTurnEnv(dataset=rows(["nan", "ok", "inf", "ok"] * 2), rubric=NanRubric(funcs=[nan_reward]))
    trainer, history = train(server, tmp_path, env)
    # Batch 0: rows "nan" + "ok"; batch 1: rows "inf" + "ok". 4 rollouts of 8 either way.
    assert metric(history, "errors/nonfinite_reward") == [4.0] * MAX_STEPS
    assert metric(history, "errors/reward_fn") == [0.0] * MAX_STEPS
    assert all(math.isfinite(h["reward_std"]) and math.isfinite(h["grad_norm"]) for h in history)
    assert count(logs, "reward function 'nan_reward' failed") == 1  # the function's NaN
    assert count(logs, "the rubric returned a reward of inf") == 1  # the rubric's own inf
    assert all(torch.isfinite(p).all() for p in trainer.model.parameters())


class EarlyStopEnv(vf.SingleTurnEnv):
    """Rows answered "empty" end their turn at once: an empty completion."""

    def __init__(self, bias: dict, **kwargs):
        super().__init__(**kwargs)
        self.bias = bias

    async def rollout(
        self, client, model, prompt, answer="", task="default", info=None, sampling_args=None, **kw
    ):
        if answer == "empty":
            sampling_args = {**(sampling_args or {}), **self.bias}
        return await super().rollout(client, model, prompt, answer, task, info, sampling_args, **kw)


def test_empty_completions(server, tmp_path, logs, eos_bias):
    env = EarlyStopEnv(eos_bias, dataset=rows(["empty", "ok"] * 4), rubric=vf.Rubric(funcs=[length_reward]))
    _, history = train(server, tmp_path, env)
    assert metric(history, "completions/empty") == [4.0] * MAX_STEPS
    assert metric(history, "completion_length/min") == [1.0] * MAX_STEPS  # just the end-of-turn token
    assert count(logs, "were empty (the model ended its turn at once)") == 1


def test_all_equal_rewards_in_a_group(server, tmp_path, logs):
    def constant(**_) -> float:
        return 1.0

    env = vf.SingleTurnEnv(dataset=rows(["ok"] * 8), rubric=vf.Rubric(funcs=[constant]))
    trainer, history = train(server, tmp_path, env)
    assert metric(history, "zero_std_groups_frac") == [1.0] * MAX_STEPS
    assert metric(history, "reward_std") == [0.0] * MAX_STEPS
    assert all(abs(h["loss"]) < 1e-9 for h in history)  # zero advantages: nothing to learn
    assert count(logs, "had equal rewards") == 1


def test_completions_cut_at_max_tokens(server, tmp_path, logs):
    env = vf.SingleTurnEnv(dataset=rows(["ok"] * 8), rubric=vf.Rubric(funcs=[length_reward]))
    # Every completion runs to max_tokens and is masked: batches with no trainable token.
    _, history = train(server, tmp_path, env, mask_truncated_completions=True)
    assert metric(history, "truncated_frac") == [1.0] * MAX_STEPS
    assert metric(history, "completion_length/max") == [8.0] * MAX_STEPS
    assert all(h["loss"] == 0.0 for h in history)
    assert count(logs, "were cut at max_tokens") == 1
    assert count(logs, "has no trainable tokens") == 1


class TwoTurnEnv(vf.MultiTurnEnv):
    def is_completed(self, messages, state, **kwargs):
        return False

    def env_response(self, messages, state, **kwargs):
        return [{"role": "user", "content": "go on"}], state


def test_chat_template_that_rewrites_earlier_turns(server, tmp_path, logs, eos_bias):
    sampling = {**eos_bias, "extra_body": {"chat_template": REWRITING_TEMPLATE}}
    env = TwoTurnEnv(
        dataset=rows(["ok"] * 8), rubric=vf.Rubric(funcs=[length_reward]), max_turns=2, sampling_args=sampling
    )
    _, history = train(server, tmp_path, env)
    assert metric(history, "template_rewrites") == [8.0] * MAX_STEPS
    assert metric(history, "samples_per_rollout") == [2.0] * MAX_STEPS  # one sample per turn
    assert count(logs, "the chat template rewrote an earlier turn") == 1


@pytest.mark.slow
def test_server_killed_and_restarted(server, tmp_path, logs):
    """Two SIGKILLs: one while batch 1 generates, one just before the last weight sync.

    After each, the new server comes back with the base weights; the trainer waits
    (with backoff), pushes its weights again and goes on. At the end the server must
    serve exactly the trainer's weights.
    """
    from tests.doubles.vllm_server import bound_unix_sockets

    kills: list[str] = []
    folders: set[Path] = set()  # the killed servers' socket folders
    listed: list[Path] = []  # and what those list: rendezvous files, shared memory

    def kill_and_restart(where: str) -> None:
        (folder,) = {path.parent for path in bound_unix_sockets(server.proc.pid)}
        folders.add(folder)
        listed.extend(map(Path, (folder / "leftovers").read_text().split()))
        server.kill()
        server.start()
        kills.append(where)

    class KillDuringGeneration(vf.SingleTurnEnv):
        def setup_state(self, state, **kwargs):
            self.calls = getattr(self, "calls", 0) + 1
            if self.calls == 9:  # the first rollout of batch 1
                kill_and_restart("generation")
            return state

    class KillBeforeLastSync(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 3:
                kill_and_restart("sync")

    def add_killer(trainer):
        # First in line: runs before the trainer's own on_step_end, which syncs the weights.
        trainer.callback_handler.callbacks.insert(0, KillBeforeLastSync())

    env = KillDuringGeneration(dataset=rows(["ok"] * 8), rubric=vf.Rubric(funcs=[length_reward]))
    trainer, history = train(server, tmp_path, env, callbacks=[add_killer], max_steps=3)
    assert kills == ["generation", "sync"]
    assert len(folders) == 2 and not [f for f in folders if f.exists()]  # each removed by the next start
    assert len([p for p in listed if p.name.startswith("psm_")]) >= 2  # each server's engine queues
    assert not [p for p in listed if p.exists()]  # SIGKILLed with its resource tracker: removed by us
    assert metric(history, "errors/server_restarts") == [0.0, 1.0, 1.0]
    assert count(logs, "stopped answering") == 1

    client = server.client()
    try:
        health = client.health()
        assert health["weight_version"] == trainer.client.version and not trainer.client.lost_weights(health)
        # The restarted server samples from the trained weights: its log-probs are the trainer's.
        extra = {"return_token_ids": True, "return_tokens_as_token_ids": True}
        out = client.sync_openai.completions.create(
            model=health["model"], prompt="Count to three.", max_tokens=8, logprobs=1, extra_body=extra
        )
    finally:
        client.close()
    choice = out.choices[0]
    ids = torch.tensor([list(choice.prompt_token_ids) + list(choice.token_ids)])
    from verifiers.training.loss.logprobs import sequence_logprobs

    with torch.no_grad():
        lp, _ = sequence_logprobs(trainer.model, ids, torch.ones_like(ids), len(choice.prompt_token_ids))
    gap = max(abs(a - b) for a, b in zip(lp[0].tolist(), choice.logprobs.token_logprobs, strict=True))
    assert gap < 1e-3, gap
