"""A scripted environment and a rollout producer over it: generation without a server or a model.

Stands in for an environment's ``a_generate``: ``FakeEnv`` returns canned ``GenerateOutputs``
(completion = prompt reversed, reward = its length), records each call and can fail or wait on
cue. ``make_producer`` builds the trainer's ``RolloutProducer`` over ``DATASET`` with it.

Used by the default tier's unit and component tests of the generation stage
(tests/training/generation/, tests/training/test_stage_interfaces.py) and tests/test_guide_snippets.py.
"""

from __future__ import annotations

import asyncio

from verifiers.training.generation.producer import PromptStream, RolloutProducer
from verifiers.types import GenerateOutputs


class FakeEnv:
    """Completion = prompt reversed; reward = completion length; records each call."""

    def __init__(self, delay: float = 0.0, fail_on_call: int | None = None):
        self.delay, self.fail_on_call = delay, fail_on_call
        self.calls: list[dict] = []

    async def a_generate(
        self, inputs, client, model, sampling_args=None, score_rollouts=True, max_concurrent=-1
    ):
        self.calls.append({"n": len(inputs["prompt"]), "sampling_args": dict(sampling_args or {})})
        if self.fail_on_call is not None and len(self.calls) - 1 == self.fail_on_call:
            raise ValueError("server exploded")
        await asyncio.sleep(self.delay)
        seed = (sampling_args or {}).get("seed", 0)
        completions = [f"{p[::-1]}#{seed}" for p in inputs["prompt"]]
        n = len(completions)
        return GenerateOutputs(
            prompt=list(inputs["prompt"]),
            completion=completions,
            answer=list(inputs["answer"]),
            state=[{"responses": ["raw"], "turn_tokens": [1], "is_truncated": False, "error": None}] * n,
            info=list(inputs["info"]),
            task=list(inputs["task"]),
            reward=[float(len(c)) for c in completions],
            metrics={"len": [float(len(c)) for c in completions]},
        )


DATASET = [{"prompt": f"p{i:02d}", "answer": str(i)} for i in range(10)]


def make_producer(env, *, seed=None, keep_groups=None, num_prompts=2, G=3):
    return RolloutProducer(
        env,
        client=None,
        model="m",
        dataset=DATASET,
        stream=PromptStream(len(DATASET), seed=0, shuffle=False),
        num_prompts=num_prompts,
        num_generations=G,
        seed=seed,
        keep_groups=keep_groups,
    )
