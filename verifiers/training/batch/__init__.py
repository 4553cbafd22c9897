"""Stage 2 of a step, the batch: a generated batch made ready for the loss (tensors, micro-batches; advantages from loss/).

- ``tensors.py``: processed rollouts -> padded training tensors, and their split.
- ``prepared.py``: ``PreparedBatch``, the batch being trained: this process's micro-batches (the trainer adds old/reference log-probs).
"""

__all__ = ["prepared", "tensors"]
