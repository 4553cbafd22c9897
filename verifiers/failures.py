"""Typed rollout failures: what went wrong, set where it happens, counted by kind.

A rollout that fails is a value, never an exception out of ``a_generate``: its
state carries ``state["failure"]``, a :class:`RolloutFailure` (``kind``, a
:class:`FailureKind`, and a one-line ``message``), plus ``state["error"]``, the
same message as a string for code written against 0.1.x. Code that needs to
know *why* a rollout failed reads ``failure.kind``; nothing parses the message.

:class:`FailureKind` also names the problems that do not end a rollout (a reward
function that raised, a tool that timed out) and the trainer-level ones (a
generation batch that timed out, a server outage): every kind is the trainer's
metric ``errors/<kind>`` (see ``verifiers/training/metrics/names.py``).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from verifiers.errors import ServerError, ServerTimeoutError, ServerUnreachableError


class FailureKind(str, enum.Enum):
    """Why something failed; the value is the suffix of the metric ``errors/<value>``.

    (A ``str`` enum so the value doubles as the metric suffix and compares equal to it.)
    """

    # Kinds that end a rollout (a RolloutFailure's kind).
    SETUP_STATE = "setup_state"
    SERVER_UNREACHABLE = "server_unreachable"
    SERVER_TIMEOUT = "server_timeout"
    SERVER_ERROR = "server_error"
    MODEL_CALL = "model_call"
    BAD_RESPONSE = "bad_response"
    IS_COMPLETED = "is_completed"
    ENV_RESPONSE = "env_response"
    ROLLOUT = "rollout"
    # Counted per rollout; the rollout goes on (or is scored 0 by that function only).
    REWARD_FN = "reward_fn"
    NONFINITE_REWARD = "nonfinite_reward"
    TOOL_TIMEOUT = "tool_timeout"
    # Counted per generation batch by the trainer's generator.
    GENERATION_TIMEOUT = "generation_timeout"
    SERVER_RESTARTS = "server_restarts"

    def __str__(self) -> str:
        return self.value

    @property
    def ends_rollout(self) -> bool:
        """True for the kinds a ``RolloutFailure`` may have."""
        return self in ROLLOUT_ENDING

    @property
    def per_rollout(self) -> bool:
        """True for the kinds counted from a batch's rollout states (every batch reports them)."""
        return self not in (FailureKind.GENERATION_TIMEOUT, FailureKind.SERVER_RESTARTS)

    @property
    def description(self) -> str:
        return FAILURE_DESCRIPTIONS[self]


ROLLOUT_ENDING = frozenset(
    {
        FailureKind.SETUP_STATE,
        FailureKind.SERVER_UNREACHABLE,
        FailureKind.SERVER_TIMEOUT,
        FailureKind.SERVER_ERROR,
        FailureKind.MODEL_CALL,
        FailureKind.BAD_RESPONSE,
        FailureKind.IS_COMPLETED,
        FailureKind.ENV_RESPONSE,
        FailureKind.ROLLOUT,
    }
)

FAILURE_DESCRIPTIONS: dict[FailureKind, str] = {
    FailureKind.SETUP_STATE: "rollouts ended by an exception in setup_state (reward 0, not trained)",
    FailureKind.SERVER_UNREACHABLE: "rollouts that could not reach the model server (the batch is "
    "generated again once it is back, so a trained batch reports 0)",
    FailureKind.SERVER_TIMEOUT: "rollouts ended by a model call that timed out (reward 0, not trained)",
    FailureKind.SERVER_ERROR: "rollouts ended by an error answer of the model server (reward 0, not trained)",
    FailureKind.MODEL_CALL: "rollouts ended by another exception in the model call (reward 0, not trained)",
    FailureKind.BAD_RESPONSE: "rollouts ended because the server's response could not be read "
    "(reward 0, not trained)",
    FailureKind.IS_COMPLETED: "rollouts ended by an exception in is_completed (reward 0, not trained)",
    FailureKind.ENV_RESPONSE: "rollouts ended by an exception in env_response (reward 0, not trained)",
    FailureKind.ROLLOUT: "rollouts whose own rollout() raised or set state['error'] (reward 0, not trained)",
    FailureKind.REWARD_FN: "rollouts in which a reward function raised (or returned a non-number); "
    "it scored 0",
    FailureKind.NONFINITE_REWARD: "rollouts whose reward (or a reward function's score) was NaN or "
    "infinite; scored 0",
    FailureKind.TOOL_TIMEOUT: "tool calls that ran past tool_timeout (the model got a timeout message)",
    FailureKind.GENERATION_TIMEOUT: "generation attempts that took longer than async_generation_timeout; "
    "the batch was generated again",
    FailureKind.SERVER_RESTARTS: "times the vLLM server stopped answering; the trainer waited for it, "
    "re-synced its weights and went on",
}

REWARD_RAISED, REWARD_NONFINITE = "raised", "nonfinite"
"""Values of ``state["reward_errors"][name]``: the reward function raised (or returned a
non-number), or returned NaN/inf; counted as ``errors/reward_fn`` / ``errors/nonfinite_reward``."""

# The label 0.1.x-style error strings start with, per hook ("env_response: RuntimeError: ...").
_WHERE: dict[FailureKind, str] = {
    FailureKind.SETUP_STATE: "setup_state",
    FailureKind.BAD_RESPONSE: "reading the response",
    FailureKind.IS_COMPLETED: "is_completed",
    FailureKind.ENV_RESPONSE: "env_response",
}


@dataclass(frozen=True)
class RolloutFailure:
    """Why a rollout ended early: ``kind`` (one of ``ROLLOUT_ENDING``) and a one-line ``message``."""

    kind: FailureKind
    message: str

    def __post_init__(self) -> None:
        if not isinstance(self.kind, FailureKind) or not self.kind.ends_rollout:
            raise ValueError(
                f"RolloutFailure.kind must be a FailureKind that ends a rollout, got {self.kind!r}"
            )

    def to_dict(self) -> dict[str, str]:
        """Plain data (for checkpoints loaded with ``weights_only=True``)."""
        return {"kind": self.kind.value, "message": self.message}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RolloutFailure:
        return cls(FailureKind(data["kind"]), str(data["message"]))


def format_error(err: BaseException) -> str:
    """A one-line ``"<ErrorType>: <message>"`` string."""
    text = " ".join(str(err).split()) or repr(err)
    return f"{type(err).__name__}: {text[:500]}"


def model_call_kind(err: BaseException) -> FailureKind:
    """The kind of a failed model call, from the exception's type."""
    if isinstance(err, ServerUnreachableError):
        return FailureKind.SERVER_UNREACHABLE
    if isinstance(err, ServerTimeoutError):
        return FailureKind.SERVER_TIMEOUT
    if isinstance(err, ServerError):
        return FailureKind.SERVER_ERROR
    return FailureKind.MODEL_CALL


def record_failure(state: dict[str, Any], kind: FailureKind, err: BaseException) -> RolloutFailure:
    """Mark ``state`` as failed with ``kind``: sets ``state["failure"]`` and ``state["error"]``."""
    where = _WHERE.get(kind)
    message = f"{where}: {format_error(err)}" if where else format_error(err)
    failure = RolloutFailure(kind, message)
    state["failure"] = failure
    state["error"] = message
    return failure


def failure_of(state: Mapping[str, Any]) -> RolloutFailure | None:
    """The rollout's failure, or None.

    A state from code that only sets ``state["error"]`` (a 0.1.x custom
    ``rollout``) counts as a ``FailureKind.ROLLOUT`` failure.
    """
    failure = state.get("failure")
    if isinstance(failure, RolloutFailure):
        return failure
    if isinstance(failure, Mapping):  # a state restored from plain data
        return RolloutFailure.from_dict(failure)
    error = state.get("error")
    if error is not None:
        return RolloutFailure(FailureKind.ROLLOUT, str(error))
    return None
