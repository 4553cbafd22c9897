"""Stage 2 of a step, the batch: a generated batch made ready for the loss (advantages, tensors, micro-batches).

- ``advantages.py``: group-relative advantages and difficulty filtering (pure tensor functions).
- ``tensors.py``: processed rollouts -> padded training tensors, and their split.
- ``prepared.py``: ``PreparedBatch``, the batch being trained: this process's micro-batches (the trainer adds old/reference log-probs).
"""

__all__ = ["advantages", "prepared", "tensors"]
