"""Fixtures the config tests share (tests/training/config/): a module asks for them with ``pytestmark``."""

from __future__ import annotations

import pytest


@pytest.fixture
def one_process_no_gpu(monkeypatch):
    """One process (no launcher's WORLD_SIZE) on a machine without a bf16 accelerator."""
    from verifiers.training.config import fields as config_mod

    monkeypatch.delenv("WORLD_SIZE", raising=False)
    monkeypatch.setattr(config_mod, "_bf16_accelerator", lambda: False)
