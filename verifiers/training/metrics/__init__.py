"""After each step, the metrics: what the trainer logs, and the curves of a run.

- ``names.py``: every metric name with what it means (the one registry).
- ``step.py``: per-step aggregation, rollout statistics and sample tables.
- ``curves.py``: ``curves.png``, the main metrics against the optimizer step.
"""

__all__ = ["curves", "names", "step"]
