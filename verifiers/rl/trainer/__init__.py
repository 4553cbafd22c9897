"""``verifiers.rl.trainer``: the included trainer under the path the guides name.

    from verifiers.rl.trainer import RLTrainer, RLConfig

``trainer.py`` is the training loop (``RLTrainer``, a ``GRPOTrainer``); ``orchestrator.py``
is what feeds it rollouts (``BatchGenerator`` running a ``RolloutProducer`` ahead of
training). The code lives in ``verifiers.training``; these modules re-export it. Importing
this package imports torch; without the training extra it raises ``MissingExtraError``.
"""

from verifiers.rl.trainer.orchestrator import BatchGenerator, RolloutProducer, build_generator
from verifiers.rl.trainer.trainer import GRPOConfig, GRPOTrainer, RLConfig, RLTrainer

__all__ = [
    "RLTrainer",
    "RLConfig",
    "GRPOTrainer",
    "GRPOConfig",
    "BatchGenerator",
    "RolloutProducer",
    "build_generator",
]
