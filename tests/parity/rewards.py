"""Reward functions and a judge client used on both sides of the parity tier.

Imported by the tests (ours) and loaded by path by ``oracle_driver.py`` inside the
verifiers 0.1.4 virtual environment, so it imports nothing from verifiers.
"""

from __future__ import annotations

from types import SimpleNamespace


def _text(completion) -> str:
    if isinstance(completion, str):
        return completion
    return " ".join(str(m.get("content") or "") for m in completion if m.get("role") == "assistant")


def exact(completion, answer, parser, **kwargs) -> float:
    return 1.0 if parser.parse_answer(completion) == answer else 0.0


def length_score(completion) -> float:
    return min(1.0, len(_text(completion)) / 40.0)


async def async_contains(completion, answer) -> float:
    return 1.0 if answer and answer in _text(completion) else 0.0


def uses_state(state, task, info) -> float:
    return 0.5 * len(state.get("marks", [])) + (0.25 if task == "t1" else 0.0) + info.get("bonus", 0.0)


def boom(completion) -> float:
    raise ValueError("reward function error on purpose")


def returns_none(completion) -> None:
    return None


def numeric_string(completion) -> str:
    return "0.25"


def takes_extra(completion, extra_bonus: float = 0.0) -> float:
    return extra_bonus


def takes_all(**kwargs) -> float:
    return 0.1 * len(
        sorted(k for k in ("prompt", "completion", "answer", "state", "task", "info") if k in kwargs)
    )


async def judged(prompt, completion, answer, state, judge, **kwargs) -> float:
    reply = await judge(prompt, completion, answer, state)
    return 1.0 if "yes" in reply.lower() else 0.0


LIBRARY = {
    f.__name__: f
    for f in (
        exact,
        length_score,
        async_contains,
        uses_state,
        boom,
        returns_none,
        numeric_string,
        takes_extra,
        takes_all,
    )
}


class RecordingJudge:
    """An OpenAI-like async client: says "yes" when the response part of the prompt holds "42";
    records every request."""

    def __init__(self):
        self.calls: list[dict] = []
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    async def _create(self, **kwargs):
        self.calls.append(kwargs)
        text = kwargs["messages"][0]["content"]
        content = "yes" if "42" in text.rsplit("Response", 1)[-1] else "no"
        return SimpleNamespace(choices=[SimpleNamespace(message=SimpleNamespace(content=content))])
