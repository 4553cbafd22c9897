"""Fixtures the vf-rl tests share (tests/cli/rl/): a module asks for them with ``pytestmark``
(``one_process`` and ``config_file``, shared with vf-train's and vf-setup's tests: tests/cli/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture
def quick_restarts(monkeypatch):
    """vf-rl's first restart after 0.2 s instead of its real delay."""
    from verifiers.cli.rl import launcher as rl_launcher

    monkeypatch.setattr(rl_launcher, "RESTART_FIRST_DELAY_S", 0.2)
