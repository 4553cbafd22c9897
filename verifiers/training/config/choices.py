"""The vocabulary of the training config: names the stages implement and the config accepts.

Declared here, in the config layer, so the config checks a value without importing the
stage that acts on it (dependencies run config <- stages); each stage imports its names
from here, and a test checks the stage implements exactly these.
"""

from __future__ import annotations

LOSS_TYPES: tuple[str, ...] = ("grpo", "bnpo", "dr_grpo", "dapo", "cispo", "gspo")
"""``loss_type`` values: one loss function each in ``training/loss/losses.py``."""

CPU_PHASES: tuple[str, ...] = ("auto", "exclusive", "overlap")
"""``cpu_phases`` values, decided in ``training/generation/cpu_phases.py``."""

SAMPLING_SEEDS: tuple[str, ...] = ("rollout", "none")
"""``sampling_seeds`` values, applied in ``training/generation/producer.py`` (``producer_seed``).
No per-group seed: the env sends one request per rollout, and a group's members under one seed
would sample the same completion; a seeded request costs the same whoever shares its seed."""

DEFAULT_IS_CAP = 2.0
"""Truncated importance sampling's cap C (Yao et al. use 2)."""

DEFAULT_IS_MASK_BAND = (0.5, 5.0)
"""IcePop's [alpha, beta]: tokens whose importance weight falls outside are masked."""
