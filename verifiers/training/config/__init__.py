"""Stage 0 of a step, the config: every training field, its default, its rules (dependencies run
config <- stages <- trainer <- rl; nothing here imports a stage).

- ``fields.py``: ``GRPOConfig`` (each field once, with its help) and ``grpo_defaults``.
- ``presets.py``: the one table of presets (field -> default / small / RLConfig and vf-rl, with reasons).
- ``rules.py``: the one rule set; RLConfig and the TOML layer translate names and call it.
- ``choices.py``: the names the stages implement (loss types, cpu phases) and their defaults.
- ``batch_layout.py``: samples per step / generation batch, and the generation plan.
- ``assigned.py``: fields assigned after ``grpo_defaults()`` (the 0.1.x habit), resolved into a new config.
- ``collective.py``: the process-group timeout a config implies (applied when training starts).
- ``lora.py``: ``lora_defaults`` and its checks.
- ``trl_names.py``: TRL field names, refused or translated with the fix.

``GRPOConfig``, ``grpo_defaults`` and ``lora_defaults`` are offered here (imported on first use:
they import transformers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from verifiers.utils.extras import lazy_getattr

_NAMES = {
    "GRPOConfig": "verifiers.training.config.fields",
    "grpo_defaults": "verifiers.training.config.fields",
    "lora_defaults": "verifiers.training.config.lora",
}

__all__ = list(_NAMES)

__getattr__ = lazy_getattr(__name__, _NAMES)

if TYPE_CHECKING:  # pragma: no cover
    from verifiers.training.config.fields import GRPOConfig, grpo_defaults  # noqa: F401
    from verifiers.training.config.lora import lora_defaults  # noqa: F401
