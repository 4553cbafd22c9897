"""0.1.x module path ``verifiers.trainers.grpo_config``: re-exports ``verifiers.training.config.fields``.

Importing it imports transformers (as in 0.1.x); without the training extra
it raises ``MissingExtraError`` naming the extra.
"""

from verifiers.utils.compat import import_training_module

_config = import_training_module("verifiers.training.config.fields", "verifiers.trainers.grpo_config")
GRPOConfig = _config.GRPOConfig
grpo_defaults = _config.grpo_defaults
lora_defaults = _config.lora_defaults

__all__ = ["GRPOConfig", "grpo_defaults", "lora_defaults"]
