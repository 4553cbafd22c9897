"""``verifiers.rl.trainer.orchestrator``: what feeds the trainer rollouts.

``RolloutProducer`` (prompts -> ``env.a_generate`` through the server -> one batch of
token data) run ahead of training by ``BatchGenerator`` in a background thread;
``build_generator`` wires them from a ``GRPOConfig``. Re-exported from
``verifiers.training.generation.producer`` / ``verifiers.training.generation.generator``.
"""

from verifiers.utils.compat import import_training_module

_gen = import_training_module("verifiers.training.generation.generator", "verifiers.rl.trainer.orchestrator")
_prod = import_training_module("verifiers.training.generation.producer", "verifiers.rl.trainer.orchestrator")

BatchGenerator = _gen.BatchGenerator
build_generator = _gen.build_generator
RolloutProducer = _prod.RolloutProducer
GeneratedBatch = _prod.GeneratedBatch

__all__ = ["BatchGenerator", "build_generator", "RolloutProducer", "GeneratedBatch"]
