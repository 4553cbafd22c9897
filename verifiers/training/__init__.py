"""GRPO training, one subpackage per stage of a step (docs/architecture.md draws one step).

Dependencies run one way, each package importing only those before it: ``config`` <-
``types.py`` (what crosses the stages), ``processes.py`` and ``shards.py`` <- the stages
``metrics`` <- ``loss`` <- ``batch`` <- ``weights`` <- ``generation`` <- ``lifecycle`` <-
``trainer.py`` (wiring only) <- ``rl`` (tests/test_import_graph.py checks it). The public
names below import torch on first use; ``import verifiers.training`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from verifiers.utils.extras import lazy_getattr

_NAMES = {
    "GRPOConfig": "verifiers.training.config.fields",
    "grpo_defaults": "verifiers.training.config.fields",
    "lora_defaults": "verifiers.training.config.lora",
    "GRPOTrainer": "verifiers.training.trainer",
    "RLConfig": "verifiers.training.rl",
    "RLTrainer": "verifiers.training.rl",
}

__all__ = list(_NAMES)

__getattr__ = lazy_getattr(__name__, _NAMES)

if TYPE_CHECKING:  # pragma: no cover
    from verifiers.training.config.fields import GRPOConfig, grpo_defaults  # noqa: F401
    from verifiers.training.config.lora import lora_defaults  # noqa: F401
    from verifiers.training.rl import RLConfig, RLTrainer  # noqa: F401
    from verifiers.training.trainer import GRPOTrainer  # noqa: F401
