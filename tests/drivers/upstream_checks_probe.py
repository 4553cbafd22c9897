"""Probe of the checks upstream never made up front, run under a release's Python or ours.

Prints JSON: what happens to a JudgeRubric whose judge_prompt names a field of its own, and to
a reward function wrapped as ``functools.update_wrapper(partial(f, ...), f)``. Used by
tests/parity/test_upstream_checks.py (the same script on both sides).
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import sys


def outcome(fn):
    try:
        return {"ok": fn()}
    except Exception as e:  # the probe reports every failure as data
        return {"error": type(e).__name__, "bases": [c.__name__ for c in type(e).__mro__], "str": str(e)}


def main() -> None:
    import verifiers as vf

    out = {}

    class Client:  # judge() fails before the client when the template cannot be filled
        class chat:
            class completions:
                @staticmethod
                async def create(**kwargs):
                    raise AssertionError("the judge client was called")

    def build():
        vf.JudgeRubric(judge_client=Client(), judge_prompt="Q: {question}\nContext: {context}\nR: {response}")
        return True

    out["judge_construct"] = outcome(build)

    def judge():
        rubric = vf.JudgeRubric(judge_client=Client(), judge_prompt="Q: {question}\nContext: {context}")
        prompt = [{"role": "user", "content": "2+2?"}]
        completion = [{"role": "assistant", "content": "4"}]
        return asyncio.run(rubric.judge(prompt, completion, "4", {}))

    out["judge_call"] = outcome(judge)

    def scaled(completion, answer, scale) -> float:
        return scale * float(completion[-1]["content"] == answer)

    wrapped = functools.update_wrapper(functools.partial(scaled, scale=3.0), scaled)

    def score():
        rubric = vf.Rubric(funcs=[wrapped])
        prompt = [{"role": "user", "content": "2+2?"}]
        completion = [{"role": "assistant", "content": "4"}]
        timing = {"timing": {"scoring_ms": 0.0, "total_ms": 0.0, "generation_ms": 0.0}}
        if "prompt" in inspect.signature(rubric.score_rollout).parameters:  # 0.1.4-0.1.7 and ours
            result = asyncio.run(rubric.score_rollout(prompt, completion, "4", dict(timing)))
            return {"reward": result.reward, "metrics": result.metrics}
        state = {"prompt": prompt, "completion": completion, "answer": "4", "task": "default", "info": {}}
        state.update(timing)
        asyncio.run(rubric.score_rollout(state))
        return {"reward": state["reward"], "metrics": state["metrics"]}

    out["partial_reward"] = outcome(score)
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
