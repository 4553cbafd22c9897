"""Fixtures the vf-rl tests share (tests/cli/rl/): a module asks for them with ``pytestmark``."""

from __future__ import annotations

import pytest


@pytest.fixture
def one_process(monkeypatch):
    """No launcher's rank variables: vf-rl runs here as a user starts it, one process, no GPU pinned."""
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("RANK", raising=False)


@pytest.fixture
def quick_restarts(monkeypatch):
    """vf-rl's first restart after 0.2 s instead of its real delay."""
    from verifiers.cli.rl import launcher as rl_launcher

    monkeypatch.setattr(rl_launcher, "RESTART_FIRST_DELAY_S", 0.2)
