"""Fixtures the environment tests share (tests/envs/): a module asks for them with ``pytestmark``."""

from __future__ import annotations

import pytest


@pytest.fixture
def fresh_process_state():
    """Each test starts with no warning said yet and no server's token support remembered."""
    from verifiers.envs.model_client import forget_token_support
    from verifiers.utils.logging import reset_warn_once

    reset_warn_once()
    forget_token_support()
