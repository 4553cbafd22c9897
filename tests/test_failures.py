"""Typed rollout failures as data (verifiers/failures.py): a recorded failure sets the state's error line,
round-trips through a plain dict, and only rollout-ending kinds end a rollout. Tier 1 (pure functions)."""

from __future__ import annotations

import pytest

from verifiers.failures import FailureKind, RolloutFailure, failure_of, record_failure

pytestmark = pytest.mark.usefixtures("fresh_warnings")  # tests/conftest.py


def test_rollout_failure_is_plain_data_and_checked():
    state: dict = {}
    failure = record_failure(state, FailureKind.ENV_RESPONSE, RuntimeError("x\ny"))
    assert state["error"] == "env_response: RuntimeError: x y" == failure.message
    assert RolloutFailure.from_dict(failure.to_dict()) == failure
    assert failure_of({"failure": failure.to_dict()}) == failure
    assert failure_of({"error": None}) is None
    with pytest.raises(ValueError, match="ends a rollout"):
        RolloutFailure(FailureKind.TOOL_TIMEOUT, "not a rollout-ending kind")
