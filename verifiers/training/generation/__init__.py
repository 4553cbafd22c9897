"""Stage 1 of a step, generation: prompts -> rollouts through the server -> tokenized batches, ahead of training.

- ``producer.py``: what one generation batch is and how it is made (prompt stream, ``env.a_generate``, group filter, tokens).
- ``generator.py``: ``BatchGenerator``, the producer run ahead of training in a background thread (retries, outages).
- ``queue.py``: ``BatchQueue``: which batch may start, which are ready, how stale they may be.
- ``cpu_phases.py``: whether generation and training take turns on a shared CPU.
"""

__all__ = ["cpu_phases", "generator", "producer", "queue"]
