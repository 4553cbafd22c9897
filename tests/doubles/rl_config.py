"""An RLConfig as the RL tests build one.

Stands in for a user's ``RLConfig`` (verifiers/training/rl/config.py): the given fields, and a run
name unless given. Used by the default tier's unit tests of tests/training/rl/ (the config and
RLTrainer)."""

from __future__ import annotations

from verifiers.training.rl.config import RLConfig


def cfg(**kw) -> RLConfig:
    kw.setdefault("run_name", "t")
    return RLConfig(**kw)
