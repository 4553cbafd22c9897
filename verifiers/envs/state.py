"""The rollout state every environment returns (see docs/architecture.md, "Rollout state")."""

from __future__ import annotations

import uuid

from verifiers.failures import format_error
from verifiers.types import Info, Messages, State

__all__ = ["format_error", "new_state"]


def new_state(prompt: Messages, answer: str, task: str, info: Info) -> State:
    """A fresh rollout state with every key of the contract in docs/architecture.md."""
    return {
        "prompt": prompt,
        "completion": "" if isinstance(prompt, str) else [],
        "answer": answer,
        "task": task,
        "info": info,
        "responses": [],
        "turn_tokens": [],
        "turn": 0,
        # 0.1.8+: one step per model call (prompt, completion, response, tokens), and why it stopped.
        "trajectory": [],
        "trajectory_id": uuid.uuid4().hex,
        "stop_condition": None,
        "is_truncated": False,
        "error": None,
        "failure": None,
        "timing": {"generation_ms": 0.0, "scoring_ms": 0.0, "total_ms": 0.0},
    }
