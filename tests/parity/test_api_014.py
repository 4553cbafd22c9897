"""0.1.4's public methods exist with 0.1.4's signatures and meaning (no oracle needed: runs offline).

The parameter lists below are 0.1.4's, read from its source; the differential tests in
test_parity.py check the results against 0.1.4 itself where PyPI is reachable.
"""

from __future__ import annotations

import asyncio
import inspect
import math

import pytest

import verifiers as vf
from tests.doubles.openai_server import fake_server
from verifiers.errors import ConfigError

SIGNATURES_014 = [
    (
        vf.Rubric,
        "call_reward_func",
        ["func", "prompt", "completion", "answer", "state", "task", "info", "kwargs"],
    ),
    (vf.Rubric, "score_rollout", ["prompt", "completion", "answer", "state", "task", "info", "kwargs"]),
    (vf.RubricGroup, "score_rollout", ["prompt", "completion", "answer", "state", "task", "info", "kwargs"]),
    (vf.Environment, "format_prompt", ["prompt_str", "system_prompt", "few_shot"]),
    (
        vf.Environment,
        "format_dataset",
        ["dataset", "system_prompt", "few_shot", "question_key", "answer_key"],
    ),
    (
        vf.Environment,
        "run_rollouts",
        [
            "client",
            "model",
            "prompts",
            "answers",
            "tasks",
            "infos",
            "sampling_args",
            "max_concurrent",
            "kwargs",
        ],
    ),
    (
        vf.Environment,
        "process_env_results_vllm",
        [
            "prompts",
            "completions",
            "states",
            "rewards",
            "processing_class",
            "max_seq_len",
            "mask_env_responses",
            "mask_truncated_completions",
            "zero_truncated_completions",
        ],
    ),
    (vf.Environment, "parse_chat_completion_tokens", ["chat_completion"]),
    (vf.Environment, "parse_chat_completion_logprobs", ["chat_completion"]),
    (vf.Environment, "parse_completion_tokens", ["completion"]),
    (vf.Environment, "parse_completion_logprobs", ["completion"]),
    (
        vf.JudgeRubric,
        "__init__",
        [
            "parser",
            "parallelize_scoring",
            "judge_client",
            "judge_model",
            "judge_sampling_args",
            "judge_prompt",
        ],
    ),
]


@pytest.mark.parametrize(
    "cls, name, params", SIGNATURES_014, ids=lambda x: getattr(x, "__name__", str(x))[:30]
)
def test_014_signatures(cls, name, params):
    names = [p for p in inspect.signature(getattr(cls, name)).parameters if p != "self"]
    assert names[: len(params)] == params  # ours may add keyword-only extras after them


def test_env_group_rubric_014_signature_and_names():
    from verifiers.envs.group import EnvGroupRubric

    names = list(inspect.signature(EnvGroupRubric.score_rollout).parameters)[1:]
    assert names == ["prompt", "completion", "answer", "state", "task", "info", "kwargs"]
    b = vf.SingleTurnEnv(dataset={"question": ["q"]}, rubric=vf.Rubric(funcs=[lambda completion: 1.0]))

    def zeta(completion) -> float:
        return 0.5

    a = vf.SingleTurnEnv(dataset={"question": ["q"]}, rubric=vf.Rubric(funcs=[zeta]))
    group = vf.EnvGroup([a, b])
    assert isinstance(group.rubric, vf.Rubric)
    assert group.rubric.all_reward_names == ["<lambda>", "zeta"]  # sorted, as in 0.1.4
    score = asyncio.run(group.rubric.score_rollout([], [], "", None, task="env_0"))
    assert score.reward == 0.5 and score.metrics == {"<lambda>": 0.0, "zeta": 0.5}


def test_format_prompt_uses_only_what_it_is_given():
    env = vf.SingleTurnEnv(dataset={"question": ["q"]}, system_prompt="S")
    assert env.format_prompt("hi") == [{"role": "user", "content": "hi"}]
    shot = [{"role": "user", "content": "1+1"}, {"role": "assistant", "content": "2"}]
    assert env.format_prompt("hi", "T", shot) == [
        {"role": "system", "content": "T"},
        *shot,
        {"role": "user", "content": "hi"},
    ]
    assert env.dataset[0]["prompt"] == [{"role": "system", "content": "S"}, {"role": "user", "content": "q"}]


def test_format_dataset_question_and_answer_keys():
    env = vf.SingleTurnEnv(dataset={"question": ["q"]})
    ds = env.format_dataset(
        vf.load_example_dataset("reverse_text", n=2).rename_columns({"question": "q", "answer": "a"}),
        "S",
        None,
        "q",
        "a",
    )
    assert ds[0]["prompt"][0] == {"role": "system", "content": "S"} and ds["answer"] == ds["a"]


def chat_response(ids, logprobs, content="x"):
    return {
        "choices": [
            {
                "message": {"role": "assistant", "content": content},
                "logprobs": {
                    "content": [
                        {"token": f"token_id:{t}", "logprob": lp} for t, lp in zip(ids, logprobs, strict=True)
                    ]
                },
            }
        ]
    }


def test_parse_chat_completion_tokens_and_logprobs():
    env = vf.SingleTurnEnv(dataset={"question": ["q"]})
    response = chat_response([5, 9], [-0.5, -1.0])
    assert env.parse_chat_completion_tokens(response) == [5, 9]
    assert env.parse_chat_completion_logprobs(response) == [-0.5, -1.0]
    text = {"choices": [{"text": "a", "logprobs": {"tokens": ["token_id:3"], "token_logprobs": [-0.25]}}]}
    assert env.parse_completion_tokens(text) == [3] and env.parse_completion_logprobs(text) == [-0.25]
    with pytest.raises(ConfigError, match="no token ids"):
        env.parse_chat_completion_tokens({"choices": [{"message": {"content": "x"}, "logprobs": None}]})


def test_process_env_results_of_014_states(smol_tokenizer):
    """A state with vLLM responses (no turn_tokens): 0.1.4's assembly, truncation and flags."""
    env = vf.SingleTurnEnv(dataset={"question": ["q"]})
    prompt = [{"role": "user", "content": "Say hi"}]
    completion = [
        {"role": "assistant", "content": "hi"},
        {"role": "user", "content": "again"},
        {"role": "assistant", "content": "hi hi"},
    ]
    state = {"responses": [chat_response([11, 12], [-0.1, -0.2], "hi"), chat_response([13], [-0.3], "hi hi")]}
    prompt_ids = list(
        smol_tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True)["input_ids"]
    )
    out = env.process_env_results_vllm(
        [prompt], [completion], [state], [1.0], smol_tokenizer, mask_env_responses=True
    )
    assert out.prompt_ids == [prompt_ids] and out.prompt_mask == [[1] * len(prompt_ids)]
    ids, mask, lps = out.completion_ids[0], out.completion_mask[0], out.completion_logprobs[0]
    assert ids[:2] == [11, 12] and ids[-1] == 13 and len(ids) > 3
    assert mask == [1, 1] + [0] * (len(ids) - 3) + [1]
    assert lps[:2] == [-0.1, -0.2] and lps[-1] == -0.3 and set(lps[2:-1]) == {0.0}
    unmasked = env.process_env_results([prompt], [completion], [state], [1.0], smol_tokenizer)
    assert all(math.isnan(x) for x in unmasked.completion_logprobs[0][2:-1])  # env tokens: unknown
    cut = env.process_env_results(
        [prompt],
        [completion],
        [state],
        [1.0],
        smol_tokenizer,
        max_seq_len=len(prompt_ids) + 1,
        mask_truncated_completions=True,
        zero_truncated_completions=True,
    )
    assert cut.completion_ids == [[11]] and cut.completion_mask == [[0]] and cut.rewards == [0.0]


async def test_run_rollouts_returns_completions_and_states_in_order():
    with fake_server() as server:
        env = vf.SingleTurnEnv(dataset={"question": ["q0", "q1"]})
        prompts = list(env.dataset["prompt"])
        pairs = await env.run_rollouts(
            server.client(), "m", prompts, ["a", "b"], ["default"] * 2, [{}, {}], max_concurrent=1
        )
    assert [c for c, _ in pairs] == [
        [{"role": "assistant", "content": "echo: q0"}],
        [{"role": "assistant", "content": "echo: q1"}],
    ]
    assert [s["answer"] for _, s in pairs] == ["a", "b"]


def test_example_dataset_names_014():
    from verifiers.utils import data

    assert sorted(data.HUB_DATASETS) == sorted(
        [
            "aime2024",
            "aime2025",
            "amc2023",
            "gpqa_diamond",
            "gpqa_main",
            "gsm8k",
            "math",
            "math500",
            "mmlu",
            "mmlu_pro",
            "openbookqa",
            "openrs",
            "openrs_easy",
            "openrs_hard",
            "prime_code",
        ]
    )
