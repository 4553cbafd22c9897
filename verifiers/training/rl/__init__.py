"""``RLConfig`` / ``RLTrainer``: the LoRA-first front door onto ``GRPOTrainer``, counted in rollouts.

- ``config.py``: ``RLConfig`` (rollout counts, LoRA, sampling) -> a ``GRPOConfig``.
- ``trainer.py``: ``RLTrainer``, a ``GRPOTrainer`` built from an ``RLConfig``.
- ``output.py``: what a run shows: the one-line step summary, samples, ``metrics.jsonl``.

Both names import torch on first use; ``import verifiers.training.rl`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from verifiers.utils.extras import lazy_getattr

_NAMES = {"RLConfig": "verifiers.training.rl.config", "RLTrainer": "verifiers.training.rl.trainer"}

__all__ = list(_NAMES)

__getattr__ = lazy_getattr(__name__, _NAMES)

if TYPE_CHECKING:  # pragma: no cover
    from verifiers.training.rl.config import RLConfig  # noqa: F401
    from verifiers.training.rl.trainer import RLTrainer  # noqa: F401
