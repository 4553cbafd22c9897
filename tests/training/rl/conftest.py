"""Fixtures the RL tests share (tests/training/rl/): a module asks for them with ``pytestmark``."""

from __future__ import annotations

import pytest


@pytest.fixture
def one_process(monkeypatch):
    """No launcher's rank variables: one process, as a user runs it."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("RANK", raising=False)
