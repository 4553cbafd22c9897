"""Typed containers passed between stages.

Data flows one way: dataset row -> ``Environment.rollout`` (a ``State`` holding
one ``TurnTokens`` per assistant turn) -> ``Rubric`` (``RolloutScore``) ->
``GenerateOutputs`` -> ``process_env_results`` (``ProcessedOutputs``) -> trainer.
Only the trainer turns these into dicts of tensors.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Union

ChatMessage = dict[str, Any]
"""An OpenAI chat message: ``{"role": ..., "content": ..., ["tool_calls" | "tool_call_id"]}``."""
Messages = Union[str, list[ChatMessage]]
"""A prompt or completion: a string (completion API) or a list of chat messages."""
MessageType = Literal["chat", "completion"]
State = dict[str, Any]
Info = dict[str, Any]
SamplingArgs = dict[str, Any]
RewardFunc = Callable[..., Union[float, Awaitable[float]]]


@dataclass
class TurnTokens:
    """The exact tokens of one model call, as the server saw and sampled them.

    ``prompt_ids`` is the whole prompt the server tokenized for this call (for a
    later turn it includes all earlier turns); ``completion_ids`` and
    ``completion_logprobs`` are the sampled tokens and their log-probabilities
    under the sampling policy (same length). ``finish_reason`` is the server's
    (``"length"`` means the turn was cut at ``max_tokens``).
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    completion_logprobs: list[float]
    finish_reason: str | None = None


@dataclass
class RolloutScore:
    """Score of one rollout: the weighted reward and each function's raw score."""

    reward: float
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass
class RolloutScores:
    """Scores of many rollouts, aligned by index."""

    reward: list[float]
    metrics: dict[str, list[float]] = field(default_factory=dict)


@dataclass
class GenerateOutputs:
    """Rollouts and their scores, aligned by index (one entry per rollout)."""

    prompt: list[Messages]
    completion: list[Messages]
    answer: list[str]
    state: list[State]
    info: list[Info]
    task: list[str]
    reward: list[float]
    metrics: dict[str, list[float]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.prompt)

    def __getitem__(self, key: str) -> Any:
        # 0.1.x users index results like a dict (results["reward"]).
        return getattr(self, key)


@dataclass
class ProcessedOutputs:
    """Token-level training data, one entry per training sample.

    Usually one sample per rollout; a rollout whose chat template rewrote
    earlier turns becomes one sample per assistant turn (``rollout_index``
    says which rollout each sample came from). ``completion_mask`` is the loss
    mask (1 = trained token: a model-sampled token); it is not an attention
    mask. ``completion_logprobs`` are the server's sampling log-probs (0.0 where
    the mask is 0).
    """

    prompt_ids: list[list[int]]
    prompt_mask: list[list[int]]
    completion_ids: list[list[int]]
    completion_mask: list[list[int]]
    completion_logprobs: list[list[float]]
    rewards: list[float]
    rollout_index: list[int] = field(default_factory=list)
    is_truncated: list[bool] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.prompt_ids)

    def __getitem__(self, key: str) -> Any:
        return getattr(self, key)
