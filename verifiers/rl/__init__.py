"""The package path the guides name for the included trainer: ``verifiers.rl``.

``verifiers.rl.trainer`` holds ``RLTrainer`` / ``RLConfig`` (trainer.py) and the
generation side, the "orchestrator" (orchestrator.py). They are the classes of
``verifiers.training``, re-exported under this path; ``import verifiers.rl`` stays light
(the training stack is imported by ``verifiers.rl.trainer``).
"""

from __future__ import annotations

from typing import Any

_NAMES = ("RLConfig", "RLTrainer")
__all__ = list(_NAMES)


def __getattr__(name: str) -> Any:
    if name not in _NAMES:
        raise AttributeError(f"module 'verifiers.rl' has no attribute {name!r}")
    import verifiers

    return getattr(verifiers, name)
