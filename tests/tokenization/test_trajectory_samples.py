"""Training from ``state["trajectory"]`` (0.1.8+): each step's stored tokens are the source; a
trajectory that is not a linear continuation trains one sample per step, never re-tokenized."""

from __future__ import annotations

import pytest

from verifiers.tokenization.assembly import process_rollouts, trajectory_is_linear, trajectory_turns
from verifiers.types import TurnTokens

pytestmark = pytest.mark.usefixtures("fresh_warnings")  # tests/conftest.py


def msg(role: str, content: str) -> dict:
    return {"role": role, "content": content}


def step(prompt, completion, prompt_ids, completion_ids, logprobs, truncated=False) -> dict:
    return {
        "prompt": prompt,
        "completion": completion,
        "tokens": {
            "prompt_ids": prompt_ids,
            "prompt_mask": [0] * len(prompt_ids),
            "completion_ids": completion_ids,
            "completion_mask": [1] * len(completion_ids),
            "completion_logprobs": logprobs,
            "overlong_prompt": False,
            "is_truncated": truncated,
        },
        "reward": None,
        "advantage": None,
        "is_truncated": truncated,
        "trajectory_id": "t",
        "extras": {},
    }


U0, A0, U1, A1 = msg("user", "q"), msg("assistant", "a"), msg("user", "more"), msg("assistant", "b")


def linear_state() -> dict:
    return {
        "trajectory": [
            step([U0], [A0], [1, 2], [3, 4], [-0.1, -0.2]),
            step([U0, A0, U1], [A1], [1, 2, 3, 4, 5, 6], [7], [-0.3]),
        ],
        # stale copies that must not be read: the trajectory is the source
        "turn_tokens": [TurnTokens([90], [91], [-9.0]), TurnTokens([90, 91, 92], [93], [-9.0])],
    }


def test_linear_trajectory_is_one_sample_from_its_step_tokens():
    out = process_rollouts([linear_state()], [0.5], None, mask_env_responses=True)
    assert out.prompt_ids == [[1, 2]]
    assert out.completion_ids == [[3, 4, 5, 6, 7]]
    assert out.completion_mask == [[1, 1, 0, 0, 1]]
    assert out.completion_logprobs == [pytest.approx([-0.1, -0.2, 0.0, 0.0, -0.3])]
    assert out.rewards == [0.5] and out.rollout_index == [0]
    assert out.metrics["trajectory_splits"] == 0 and out.metrics["template_rewrites"] == 0
    assert out.metrics["retokenized"] == 0


def test_non_linear_trajectory_trains_each_step_from_its_stored_tokens(caplog):
    # Step 1's prompt was built by the module (a summary), not by extending step 0.
    summary = [msg("system", "sys"), msg("user", "summary of q/a; now: more")]
    state = {
        "trajectory": [
            step([U0], [A0], [1, 2], [3, 4], [-0.1, -0.2]),
            step(summary, [A1], [8, 9, 5, 6], [7, 10], [-0.3, -0.4], truncated=True),
        ]
    }
    assert not trajectory_is_linear(state["trajectory"])
    # processing_class=None: any re-tokenization would fail
    out = process_rollouts([state, linear_state()], [1.0, 0.0], None)
    assert out.prompt_ids[:2] == [[1, 2], [8, 9, 5, 6]]
    assert out.completion_ids[:2] == [[3, 4], [7, 10]]
    assert out.completion_mask[:2] == [[1, 1], [1, 1]]
    assert out.completion_logprobs[:2] == [pytest.approx([-0.1, -0.2]), pytest.approx([-0.3, -0.4])]
    assert out.rewards[:2] == [1.0, 1.0] and out.rollout_index == [0, 0, 1]
    assert out.is_truncated == [True, True, False]  # a truncated step truncates its rollout's samples
    assert out.metrics["trajectory_splits"] == 1 and out.metrics["template_rewrites"] == 0
    assert out.metrics["samples"] == 3
    assert "rewrote" not in caplog.text  # by design, not a template problem: no warning


def test_linear_messages_with_rewritten_tokens_is_still_a_template_rewrite():
    state = linear_state()
    state["trajectory"][1]["tokens"]["prompt_ids"] = [1, 2, 99, 5, 6]  # template changed turn 0's text
    out = process_rollouts([state], [1.0], None)
    assert out.metrics["template_rewrites"] == 1 and out.metrics["trajectory_splits"] == 0
    assert out.completion_ids == [[3, 4], [7]]


def test_steps_without_tokens_fall_back_to_turn_tokens():
    state = linear_state()
    state["trajectory"][1]["tokens"] = None  # the server sent no token ids for that call
    assert trajectory_turns(state) is None
    out = process_rollouts([state], [1.0], None)
    assert out.prompt_ids == [[90]] and out.completion_ids == [[91, 92, 93]]
    assert trajectory_turns({"trajectory": []}) is None and trajectory_turns({}) is None


def test_trajectory_is_linear_compares_roles_and_contents():
    steps = linear_state()["trajectory"]
    assert trajectory_is_linear(steps) and trajectory_is_linear(steps[:1])
    steps[1]["prompt"] = [U0, msg("assistant", "edited"), U1]
    assert not trajectory_is_linear(steps)
