"""An environment module in verifiers 0.1.11/0.1.12's style (written for tests/compat/, not copied):
tool definitions from ``convert_func_to_tool_def``, ``vf.Message`` annotations, an
``is_completed`` that asks ``prompt_too_long(state)`` first, and a stop hook."""

from __future__ import annotations

from datasets import Dataset

import verifiers as vf
from verifiers.utils.tool_utils import convert_func_to_tool_def


def add(a: int, b: int) -> int:
    """Add two integers.

    Args:
        a: The first integer.
        b: The second integer.
    """
    return a + b


class CountdownEnv(vf.MultiTurnEnv):
    async def is_completed(self, messages: vf.Messages, state: vf.State, **kwargs) -> bool:
        if await self.prompt_too_long(state):
            return True
        return await super().is_completed(messages, state, **kwargs)

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs) -> vf.Messages:
        last: vf.Message = messages[-1]
        left = int(state["answer"]) - len(state["trajectory"])
        return [{"role": "user", "content": f"{left} to go (you said {last['content']!r})"}]


def load_environment(max_turns: int = 3, **kwargs) -> vf.Environment:
    dataset = Dataset.from_list([{"question": f"Count down from {n}.", "answer": str(n)} for n in (2, 3)])

    def turns(state) -> float:
        return float(len(state["trajectory"]))

    env = CountdownEnv(dataset=dataset, eval_dataset=dataset, max_turns=max_turns,
                       rubric=vf.Rubric(funcs=[turns], weights=[1.0]), **kwargs)  # fmt: skip
    env.tool_defs_seen = [convert_func_to_tool_def(add)]  # what a module builds at load time
    return env
