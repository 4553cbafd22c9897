"""process_rollouts: token-in/token-out assembly, with SmolLM2's real tokenizer.

Turn tokens are built the way the server builds them: the prompt of each call is
the chat template applied to the conversation so far (with a generation prompt),
and the completion is the sampled text's tokens plus the EOS token.
"""

from __future__ import annotations

import logging
import math

import pytest

from verifiers.errors import ConfigError
from verifiers.tokenization.assembly import process_rollouts
from verifiers.types import TurnTokens
from verifiers.utils.logging import reset_warn_once

# Like Qwen3's template: the reasoning of assistant turns before the last user
# message is dropped, so later prompts do not extend earlier turns.
THINK_STRIPPING_TEMPLATE = (
    "{%- set ns = namespace(last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}"
    "{%- for m in messages -%}"
    "{%- set content = m['content'] -%}"
    "{%- if m['role'] == 'assistant' and loop.index0 < ns.last_user and '</think>' in content -%}"
    "{%- set content = content.split('</think>')[-1].lstrip() -%}"
    "{%- endif -%}"
    "{{ '<|im_start|>' + m['role'] + '\n' + content + '<|im_end|>\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\n' }}{%- endif -%}"
)


@pytest.fixture(autouse=True)
def _fresh_warnings():
    reset_warn_once()
    yield
    reset_warn_once()


def chat_ids(tok, messages, add_generation_prompt, template=None):
    kw = {"chat_template": template} if template else {}
    out = tok.apply_chat_template(
        messages, tokenize=True, add_generation_prompt=add_generation_prompt, return_dict=False, **kw
    )
    return list(out)


def sampled(tok, text):
    """Tokens a server would return for a sampled assistant message: text + EOS."""
    return tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]


def fake_logprobs(ids, turn):
    return [-(turn + 1) - k / 100 for k in range(len(ids))]


def simulate(tok, prompt, replies, env_messages, template=None, finish_reasons=None):
    """Build a state as an environment would: one TurnTokens per model call."""
    messages = list(prompt)
    completion = []
    turns = []
    for t, reply in enumerate(replies):
        p_ids = chat_ids(tok, messages, True, template)
        c_ids = sampled(tok, reply)
        fr = (finish_reasons or {}).get(t, "stop")
        turns.append(TurnTokens(p_ids, c_ids, fake_logprobs(c_ids, t), fr))
        msg = {"role": "assistant", "content": reply}
        messages.append(msg)
        completion.append(msg)
        if t < len(env_messages):
            messages.append(env_messages[t])
            completion.append(env_messages[t])
    return {
        "prompt": list(prompt),
        "completion": completion,
        "turn_tokens": turns,
        "is_truncated": False,
    }


PROMPT = [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2+2?"}]


def test_single_turn_is_the_server_tokens(smol_tokenizer):
    tok = smol_tokenizer
    state = simulate(tok, PROMPT, ["It is 4."], [])
    out = process_rollouts([state], [1.5], tok)
    (turn,) = state["turn_tokens"]
    assert out.prompt_ids == [turn.prompt_ids]
    assert out.prompt_mask == [[1] * len(turn.prompt_ids)]
    assert out.completion_ids == [turn.completion_ids]
    assert out.completion_ids[0][-1] == tok.eos_token_id
    assert out.completion_mask == [[1] * len(turn.completion_ids)]
    assert out.completion_logprobs == [turn.completion_logprobs]
    assert out.rewards == [1.5]
    assert out.rollout_index == [0]
    assert out.is_truncated == [False]
    assert out.metrics["template_rewrites"] == 0
    assert out.metrics["retokenized"] == 0
    assert out.metrics["unknown_logprob_tokens"] == 0
    assert tok.decode(out.prompt_ids[0] + out.completion_ids[0]) == tok.decode(
        chat_ids(tok, PROMPT + [{"role": "assistant", "content": "It is 4."}], False)
    ).removesuffix("\n")


def _multi_turn_state(tok):
    env = [
        {"role": "user", "content": "Are you sure? Check again."},
        {"role": "user", "content": "Now add 3."},
    ]
    return simulate(tok, PROMPT, ["It is 4.", "Yes, 4.", "4 + 3 = 7."], env), env


def test_multi_turn_assembly_masks_env_tokens(smol_tokenizer):
    tok = smol_tokenizer
    state, env = _multi_turn_state(tok)
    t0, t1, t2 = state["turn_tokens"]
    out = process_rollouts([state], [1.0], tok, mask_env_responses=True)

    # env tokens are the template's rendering of the user message between turns,
    # taken from the next turn's prompt (no retokenizing of assistant text)
    env1 = tok.encode(f"\n<|im_start|>user\n{env[0]['content']}<|im_end|>\n<|im_start|>assistant\n")
    env2 = tok.encode(f"\n<|im_start|>user\n{env[1]['content']}<|im_end|>\n<|im_start|>assistant\n")
    assert t1.prompt_ids == t0.prompt_ids + t0.completion_ids + env1
    assert t2.prompt_ids == t1.prompt_ids + t1.completion_ids + env2

    assert out.prompt_ids == [t0.prompt_ids]
    assert out.completion_ids == [t0.completion_ids + env1 + t1.completion_ids + env2 + t2.completion_ids]
    assert out.completion_mask == [
        [1] * len(t0.completion_ids)
        + [0] * len(env1)
        + [1] * len(t1.completion_ids)
        + [0] * len(env2)
        + [1] * len(t2.completion_ids)
    ]
    assert out.completion_logprobs == [
        t0.completion_logprobs
        + [0.0] * len(env1)
        + t1.completion_logprobs
        + [0.0] * len(env2)
        + t2.completion_logprobs
    ]
    assert len(out.completion_logprobs[0]) == len(out.completion_ids[0])
    # the whole sample is the last turn's prompt + completion
    assert out.prompt_ids[0] + out.completion_ids[0] == t2.prompt_ids + t2.completion_ids
    assert out.metrics["template_rewrites"] == 0
    assert out.metrics["unknown_logprob_tokens"] == 0


def test_unmasked_env_tokens_have_unknown_logprobs(smol_tokenizer):
    tok = smol_tokenizer
    state, _ = _multi_turn_state(tok)
    t0, t1, t2 = state["turn_tokens"]
    out = process_rollouts([state], [1.0], tok, mask_env_responses=False)
    assert out.completion_mask == [[1] * len(out.completion_ids[0])]
    lps = out.completion_logprobs[0]
    n0, n1 = len(t0.completion_ids), len(t1.completion_ids)
    env1_len = len(t1.prompt_ids) - len(t0.prompt_ids) - n0
    assert lps[:n0] == t0.completion_logprobs
    assert all(math.isnan(x) for x in lps[n0 : n0 + env1_len])
    assert lps[n0 + env1_len : n0 + env1_len + n1] == t1.completion_logprobs
    assert lps[-len(t2.completion_ids) :] == t2.completion_logprobs
    env_total = len(out.completion_ids[0]) - n0 - n1 - len(t2.completion_ids)
    assert out.metrics["unknown_logprob_tokens"] == env_total


def test_many_rollouts_keep_order_and_index(smol_tokenizer):
    tok = smol_tokenizer
    a = simulate(tok, PROMPT, ["4"], [])
    b, _ = _multi_turn_state(tok)
    dict_turns = dict(b)
    dict_turns["turn_tokens"] = [vars(t) for t in b["turn_tokens"]]  # as read back from JSON
    out = process_rollouts([a, b, dict_turns], [0.0, 1.0, 2.0], tok, mask_env_responses=True)
    assert len(out) == 3
    assert out.rollout_index == [0, 1, 2]
    assert out.rewards == [0.0, 1.0, 2.0]
    assert out.completion_ids[1] == out.completion_ids[2]
    assert out.completion_mask[1] == out.completion_mask[2]
    assert out.metrics["rollouts"] == 3 and out.metrics["samples"] == 3


def test_truncation_to_max_seq_len(smol_tokenizer):
    tok = smol_tokenizer
    state, _ = _multi_turn_state(tok)
    t0 = state["turn_tokens"][0]
    full = process_rollouts([state], [1.0], tok, mask_env_responses=True)
    limit = len(t0.prompt_ids) + len(t0.completion_ids) + 3
    out = process_rollouts([state], [1.0], tok, max_seq_len=limit, mask_env_responses=True)
    assert out.prompt_ids == full.prompt_ids
    assert out.completion_ids == [full.completion_ids[0][: limit - len(t0.prompt_ids)]]
    assert out.completion_mask == [full.completion_mask[0][: limit - len(t0.prompt_ids)]]
    assert out.completion_logprobs == [full.completion_logprobs[0][: limit - len(t0.prompt_ids)]]
    assert out.is_truncated == [True]
    assert out.rewards == [1.0]
    assert out.metrics["truncated"] == 1

    masked = process_rollouts(
        [state],
        [1.0],
        tok,
        max_seq_len=limit,
        mask_truncated_completions=True,
        zero_truncated_completions=True,
    )
    assert masked.completion_mask == [[0] * len(out.completion_ids[0])]
    assert masked.completion_logprobs == [[0.0] * len(out.completion_ids[0])]
    assert masked.rewards == [0.0]

    # long enough: not truncated, untouched
    same = process_rollouts(
        [state], [1.0], tok, max_seq_len=10_000, mask_env_responses=True, mask_truncated_completions=True
    )
    assert same.is_truncated == [False] and same.completion_mask == full.completion_mask


def test_prompt_longer_than_max_seq_len_is_cut_from_the_left(smol_tokenizer):
    tok = smol_tokenizer
    state = simulate(tok, PROMPT, ["It is 4."], [])
    p = state["turn_tokens"][0].prompt_ids
    out = process_rollouts([state], [1.0], tok, max_seq_len=5)
    assert out.prompt_ids == [p[-5:]]
    assert out.completion_ids == [[]] and out.completion_mask == [[]] and out.completion_logprobs == [[]]
    assert out.is_truncated == [True]
    assert out.metrics["prompt_truncated"] == 1


def test_truncated_flags_from_state_and_finish_reason(smol_tokenizer):
    tok = smol_tokenizer
    flagged = simulate(tok, PROMPT, ["It is"], [])
    flagged["is_truncated"] = True
    by_length = simulate(tok, PROMPT, ["It is"], [], finish_reasons={0: "length"})
    ok = simulate(tok, PROMPT, ["It is 4."], [])
    out = process_rollouts(
        [flagged, by_length, ok],
        [1.0, 1.0, 1.0],
        tok,
        mask_truncated_completions=True,
        zero_truncated_completions=True,
    )
    assert out.is_truncated == [True, True, False]
    assert out.rewards == [0.0, 0.0, 1.0]
    assert [sum(m) for m in out.completion_mask[:2]] == [0, 0]
    assert sum(out.completion_mask[2]) == len(out.completion_ids[2]) > 0
    assert out.metrics["truncated"] == 2


def test_template_that_rewrites_earlier_turns_splits_per_turn(smol_tokenizer, caplog):
    tok = smol_tokenizer
    env = [{"role": "user", "content": "And 3+3?"}]
    replies = ["<think>\n2+2 is four.\n</think>\nIt is 4.", "<think>\nsix\n</think>\n6"]
    state = simulate(tok, PROMPT, replies, env, template=THINK_STRIPPING_TEMPLATE)
    t0, t1 = state["turn_tokens"]
    assert t1.prompt_ids[: len(t0.prompt_ids) + len(t0.completion_ids)] != t0.prompt_ids + t0.completion_ids
    other = simulate(tok, PROMPT, replies, env, template=THINK_STRIPPING_TEMPLATE)
    plain = simulate(tok, PROMPT, ["4"], [])

    with caplog.at_level(logging.WARNING, logger="verifiers"):
        out = process_rollouts([state, plain, other], [1.0, 0.5, 0.25], tok, mask_env_responses=True)
    assert out.rollout_index == [0, 0, 1, 2, 2]
    assert out.rewards == [1.0, 1.0, 0.5, 0.25, 0.25]
    assert out.prompt_ids[0] == t0.prompt_ids and out.completion_ids[0] == t0.completion_ids
    assert out.prompt_ids[1] == t1.prompt_ids and out.completion_ids[1] == t1.completion_ids
    assert out.completion_logprobs[1] == t1.completion_logprobs
    assert out.completion_mask[1] == [1] * len(t1.completion_ids)
    assert out.metrics["template_rewrites"] == 2
    assert out.metrics["samples"] == 5
    rewrites = [r for r in caplog.records if "rewrote" in r.getMessage()]
    assert len(rewrites) == 1  # warned once, counted in metrics


def test_fallback_retokenizes_chat_without_token_data(smol_tokenizer, caplog):
    tok = smol_tokenizer
    completion = [
        {"role": "assistant", "content": "It is 4."},
        {"role": "user", "content": "Sure?"},
        {"role": "assistant", "content": "Yes."},
    ]
    state = {"prompt": PROMPT, "completion": completion, "turn_tokens": [], "is_truncated": False}
    empty_turns = dict(state, turn_tokens=[TurnTokens([], [], [], "stop")])
    with caplog.at_level(logging.WARNING, logger="verifiers"):
        out = process_rollouts([state, empty_turns], [1.0, 1.0], tok)
    p_ids = chat_ids(tok, PROMPT, True)
    full = chat_ids(tok, PROMPT + completion, False)
    assert out.prompt_ids == [p_ids, p_ids]
    assert out.completion_ids == [full[len(p_ids) :]] * 2
    assert out.completion_mask[0] == [1] * (len(full) - len(p_ids))
    assert all(math.isnan(x) for x in out.completion_logprobs[0])
    assert out.metrics["retokenized"] == 2
    assert out.metrics["unknown_logprob_tokens"] == 2 * (len(full) - len(p_ids))
    assert len([r for r in caplog.records if "retokenized" in r.getMessage()]) == 1

    masked = process_rollouts([state], [1.0], tok, mask_env_responses=True)
    ids, mask = masked.completion_ids[0], masked.completion_mask[0]
    trained = tok.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert trained == "It is 4.<|im_end|>\nYes.<|im_end|>\n"
    assert all(
        (lp == 0.0) if m == 0 else math.isnan(lp)
        for m, lp in zip(mask, masked.completion_logprobs[0], strict=True)
    )


def test_fallback_completion_api_and_empty_completion(smol_tokenizer):
    tok = smol_tokenizer
    state = {"prompt": "The capital of France is", "completion": " Paris.", "turn_tokens": []}
    failed = {"prompt": PROMPT, "completion": [], "turn_tokens": [], "error": "boom"}
    out = process_rollouts([state, failed], [1.0, 0.0], tok)
    assert out.prompt_ids[0] == tok.encode("The capital of France is")
    assert out.completion_ids[0] == tok.encode(" Paris.", add_special_tokens=False)
    assert out.prompt_ids[1] == chat_ids(tok, PROMPT, True)
    assert out.completion_ids[1] == [] and out.completion_mask[1] == []


def test_missing_logprobs_are_nan_not_a_crash(smol_tokenizer):
    tok = smol_tokenizer
    state = simulate(tok, PROMPT, ["It is 4."], [])
    turn = state["turn_tokens"][0]
    turn.completion_logprobs = turn.completion_logprobs[:2]
    out = process_rollouts([state], [1.0], tok)
    lps = out.completion_logprobs[0]
    assert len(lps) == len(turn.completion_ids)
    assert lps[:2] == turn.completion_logprobs and all(math.isnan(x) for x in lps[2:])


def test_rewards_must_match_states(smol_tokenizer):
    with pytest.raises(ConfigError, match="2 states but 1 rewards"):
        process_rollouts([{}, {}], [1.0], smol_tokenizer)
