"""``verifiers.rl.trainer.trainer``: the training loop (``RLTrainer``, ``GRPOTrainer``) and their configs.

Re-exported from ``verifiers.training.rl.trainer`` / ``verifiers.training.trainer``
(module docstrings there say how a step runs).
"""

from verifiers.utils.compat import import_training_module

_rl = import_training_module("verifiers.training.rl.trainer", "verifiers.rl.trainer.trainer")
_grpo = import_training_module("verifiers.training.trainer", "verifiers.rl.trainer.trainer")

RLTrainer = _rl.RLTrainer
RLConfig = _rl.RLConfig
GRPOTrainer = _grpo.GRPOTrainer
GRPOConfig = _grpo.GRPOConfig

__all__ = ["RLTrainer", "RLConfig", "GRPOTrainer", "GRPOConfig"]
